"""The Spark settings every test session shares (a module of its own: test files import it by name, which
``from conftest import`` cannot do reliably when several test directories each have a conftest)."""

# Spark fails a barrier stage that lacks slots after ~10 minutes by default; make it seconds.
FAST_SLOT_CHECK = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
}
# The tests' JVMs start, load classes and run small jobs on 2 shared cores: the C1 compiler alone and the
# serial collector leave those cores to the work instead of C2 and parallel-GC threads (tests/compat's
# porting.py gives its scripts' drivers the same). Only the JVMs' speed changes, never a result.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
COMMON_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    # The driver's options apply when a test process starts its JVM (its first session); local executors
    # run inside it, a standalone cluster's executors take the executor options.
    "spark.driver.extraJavaOptions": QUICK_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": QUICK_JVM_OPTIONS,
    **FAST_SLOT_CHECK,
}
