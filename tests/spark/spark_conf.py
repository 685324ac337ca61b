"""The Spark settings every test session shares (a module of its own: test files import it by name, which
``from conftest import`` cannot do reliably when several test directories each have a conftest)."""

# Spark fails a barrier stage that lacks slots after ~10 minutes by default; make it seconds.
FAST_SLOT_CHECK = {
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
}
COMMON_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    **FAST_SLOT_CHECK,
}
