"""Live capture's reader side (docs/observability.md "Capture"): the ring file sluiced fills
(ring.py, include/sluice/capture.h) and the pcapng file it becomes (pcapng.py). No imports of the
rest of sluice: `sluice capture` (commands/capture.py) joins them to the control client."""

from .pcapng import PcapngWriter  # noqa: F401
from .ring import CaptureRing, RingError  # noqa: F401
