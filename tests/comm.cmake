# comm: the collectives (MPI suite at 1-4 ranks), the 16-bit float
# conversions they reduce with (serial), and the rank grid of data, tensor
# and pipeline parallelism (serial: coordinates and the printed grid; MPI at
# 4 and 8 ranks: every grid's groups split from the world).
zt_test(test_comm SOURCES test_comm.c LIBS zt_comm RANKS 1 2 3 4)
# The same at 4 ranks as 2 simulated nodes x 2: nodes and link classes.
add_test(NAME test_comm_np4_nodes
  COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 --oversubscribe $<TARGET_FILE:test_comm>)
set_tests_properties(test_comm_np4_nodes PROPERTIES TIMEOUT 120 PROCESSORS 4
  ENVIRONMENT "${ZT_TEST_ENV};${ZT_MPI_ENV};CK_FORK=no;ZT_SIMULATED_RANKS_PER_NODE=2"
  FIXTURES_REQUIRED zt_outputs)
zt_test(test_half SOURCES test_half.c LIBS zt_common)
zt_test(test_layout SOURCES test_layout.c LIBS zt_comm)
zt_test(test_layout_mpi SOURCES test_layout_mpi.c LIBS zt_comm RANKS 4 8)
# "mpi" with host staging (comm_staged.c) on host buffers labelled as device
# memory, through a memcpy stager: every collective, message and split
# against the plain backend bit for bit, the ledger, and failed copies.
zt_test(test_comm_staged SOURCES test_comm_staged.c LIBS zt_comm RANKS 1 2 3)
# The rule behind comm.backend auto: pure, serial.
zt_test(test_comm_choice SOURCES test_comm_choice.c LIBS zt_comm)
