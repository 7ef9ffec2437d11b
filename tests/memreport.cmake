# memreport: the per-rank memory report (gather at 1-3 ranks, expected model
# states, table and JSON). Built from its own source against the layers
# below report/ (the stage policy, comm, common), so the suite does not
# depend on the rest of report/ or on the run.
zt_test(test_memreport
  SOURCES test_memreport.c ${PROJECT_SOURCE_DIR}/report/memory_report.c
    ${PROJECT_SOURCE_DIR}/report/rss_model.c
  LIBS zt_shard zt_worker zt_comm zt_common MPI::MPI_C RANKS 1 2 3)
# rss: the predicted peak RSS (report/rss_model.h): its parts, and a run's,
# a dry run's and a plan's predictions of micro.yaml made of the same parts.
zt_test(test_rss SOURCES test_rss.c LIBS zt_report zt_worker zt_common TIMEOUT 600 LAUNCHES_MPI)
