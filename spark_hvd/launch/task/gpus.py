"""Task: which GPUs a rank's child may see, from the addresses Spark assigned to its task."""

from __future__ import annotations

from typing import Sequence

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def visible_devices(assigned: Sequence[str], inherited: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES value for a child, given Spark's addresses for its task.

    ``inherited`` is the executor's own CUDA_VISIBLE_DEVICES (None or empty: all devices).
    When the executor is already restricted (YARN, Kubernetes, a wrapper script), Spark's
    discovery script saw only those devices, so an integer address is an index into that list:
    address "1" under "4,6" is physical device 6. An address that is not such an index but is
    listed itself (a UUID, say) is taken as it is.
    """
    addresses = [a.strip() for a in assigned if a.strip()]
    if not addresses:
        raise ValueError("Spark assigned no GPU addresses to this task")
    visible = [d.strip() for d in (inherited or "").split(",") if d.strip()]
    if not visible:
        return ",".join(addresses)
    mapped = []
    for address in addresses:
        if address.isdigit() and int(address) < len(visible):
            mapped.append(visible[int(address)])
        elif address in visible:
            mapped.append(address)
        else:
            raise ValueError(
                f"Spark assigned GPU {address!r}, which is neither an index into nor a member of "
                f"the executor's {CUDA_VISIBLE_DEVICES}={inherited!r}")
    return ",".join(mapped)
