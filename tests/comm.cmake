# comm: the collectives (MPI suite at 1-4 ranks) and the 16-bit float
# conversions they reduce with (serial).
zt_test(test_comm SOURCES test_comm.c LIBS zt_comm RANKS 1 2 3 4)
zt_test(test_half SOURCES test_half.c LIBS zt_common)
