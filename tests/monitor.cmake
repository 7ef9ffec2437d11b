# What a run leaves for people and dashboards to read, through the binary:
# DeepSpeed's csv_monitor files and zerotrain plot's PNGs.
zt_test(test_csv_monitor SOURCES test_csv_monitor.c LIBS zt_common TIMEOUT 300 LAUNCHES_MPI)
zt_test(test_plot SOURCES test_plot.c LIBS zt_common TIMEOUT 300 LAUNCHES_MPI)
