# comm: the collectives (MPI suite at 1-4 ranks), the 16-bit float
# conversions they reduce with (serial), and the rank grid of data, tensor
# and pipeline parallelism (serial: coordinates and the printed grid; MPI at
# 4 and 8 ranks: every grid's groups split from the world).
zt_test(test_comm SOURCES test_comm.c LIBS zt_comm RANKS 1 2 3 4)
zt_test(test_half SOURCES test_half.c LIBS zt_common)
zt_test(test_layout SOURCES test_layout.c LIBS zt_comm)
zt_test(test_layout_mpi SOURCES test_layout_mpi.c LIBS zt_comm RANKS 4 8)
