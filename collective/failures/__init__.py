"""Every process: how a failure travels. A rank notes what it saw fail (``notes``, in the rank), writes it as a
``FailureReport`` (``report``, the one wire format), and a launcher or the Spark driver reads the reports to
blame the root cause; ``picklable`` lets exceptions with fields cross a pickle.

This package must stay importable without the C++ extension (the launchers read reports).
"""
