/* config/config_markdown.c — Markdown text for the generated references,
 * shared by the schema's and DeepSpeed's tables (config_impl.h). */
#include "config_impl.h"

void config_write_md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|' || *s == '*' || *s == '\\')
            fputc('\\', f);
        if (*s == '<')
            fputs("&lt;", f);
        else
            fputc(*s, f);
    }
}
