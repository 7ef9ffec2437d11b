zt_test(test_dist SOURCES test_dist.c LIBS zt_coordinator RANKS 1 2 3 4 TIMEOUT 300)
zt_test(test_cli SOURCES test_cli.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
zt_test(test_resume SOURCES test_resume.c LIBS zt_common TIMEOUT 600 LAUNCHES_MPI)
