# Runs across several nodes, on hosts simulated in network namespaces
# (scripts/simhosts.sh). The fixture brings two hosts up before the
# suite and removes them after it, even when it fails; where namespaces
# cannot be made (not root, no CAP_NET_ADMIN) the setup and the suite skip,
# saying why. One executable, two tests: the second takes a host's link down
# and needs comm.timeout_s (it skips until zerotrain has it). They share the
# hosts, so they never run at once.
#
# Each build tree has its own set of hosts (ZT_SIMHOSTS_ID, 1-250, from a
# hash of its path unless given): names and subnet ztK-h0, 10.213.K.0/24, so
# suites of two checkouts on one machine neither share nor remove each
# other's hosts.
if(NOT ZT_SIMHOSTS_ID)
  string(MD5 zt_tree_hash "${CMAKE_BINARY_DIR}")
  string(SUBSTRING "${zt_tree_hash}" 0 4 zt_tree_hash)
  math(EXPR ZT_SIMHOSTS_ID "0x${zt_tree_hash} % 250 + 1")
endif()
set(ZT_SIMHOSTS ${CMAKE_COMMAND} -E env ZT_SIMHOSTS_ID=${ZT_SIMHOSTS_ID}
    ${PROJECT_SOURCE_DIR}/scripts/simhosts.sh)
add_test(NAME simhosts_up COMMAND ${ZT_SIMHOSTS} up 2)
set_tests_properties(simhosts_up PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
  FIXTURES_SETUP zt_simhosts)
add_test(NAME simhosts_down COMMAND ${ZT_SIMHOSTS} down)
set_tests_properties(simhosts_down PROPERTIES TIMEOUT 60 FIXTURES_CLEANUP zt_simhosts)
zt_test(test_multihost SOURCES test_multihost.c LIBS zt_common TIMEOUT 900 LAUNCHES_MPI)
add_test(NAME test_multihost_link_down COMMAND test_multihost link-down)
set_tests_properties(test_multihost_link_down PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${ZT_TEST_ENV};${ZT_MPI_ENV}" FIXTURES_REQUIRED zt_outputs)
set_tests_properties(test_multihost test_multihost_link_down PROPERTIES
  RESOURCE_LOCK zt_simhosts)
set_property(TEST test_multihost test_multihost_link_down APPEND PROPERTY
  FIXTURES_REQUIRED zt_simhosts)
set_property(TEST test_multihost test_multihost_link_down APPEND PROPERTY
  ENVIRONMENT "ZT_SIMHOSTS_ID=${ZT_SIMHOSTS_ID}")
