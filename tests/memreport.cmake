# memreport: the per-rank memory report (gather at 1-3 ranks, expected model
# states, table and JSON). Built from its own source against the layers
# below report/ (the stage policy, comm, common), so the suite does not
# depend on the rest of report/ or on the run.
zt_test(test_memreport
  SOURCES test_memreport.c ${PROJECT_SOURCE_DIR}/report/memory_report.c
  LIBS zt_shard zt_comm zt_common MPI::MPI_C RANKS 1 2 3)
