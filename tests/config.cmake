# Configuration loader and learning-rate schedules. Both suites build from
# their own sources so that they do not wait on the rest of the coordinator
# (the config reads the optimizer and model family tables of zt_worker).
# test_config wraps malloc/calloc/realloc (GNU ld --wrap) to fail the N-th
# allocation of the loader in its fault loop; libyaml's own allocations are
# in a shared library and are not affected.
zt_test(test_config SOURCES test_config.c ../config/config.c ../config/config_schema.c
  ../config/config_deepspeed.c ../config/config_markdown.c ../config/config_hf.c ../config/yaml_tree.c
  LIBS zt_worker zt_common PkgConfig::YAML m)
zt_wrap_alloc(test_config)
zt_test(test_schedule SOURCES test_schedule.c ../worker/schedule.c LIBS zt_common)
# Machine description files: the repository's machines, lookup by name,
# bad files with their messages, and the write/load round trip.
zt_test(test_machine SOURCES test_machine.c LIBS zt_config zt_common)
