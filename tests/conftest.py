import os

import pytest

# Ranks of the test jobs must import this checkout, whatever directory pytest runs from.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture(params=["shm", "tcp"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param
