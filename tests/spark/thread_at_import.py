"""A module that leaves a thread running once imported (as TensorFlow does): a zygote that imported it must
not fork (tests/spark/test_spare_child.py, test_zygote.py)."""

import threading

_never = threading.Event()
threading.Thread(target=_never.wait, name="left-by-import", daemon=True).start()
