"""TensorFlow device strings (``/job:worker/replica:0/task:1/device:CPU:0``), parsed as ``tf.DeviceSpec`` does."""

from __future__ import annotations

from dataclasses import dataclass

from trackpoint.errors import InvalidArgumentError

__all__ = ["DeviceSpec", "parse_device"]

_DEVICE_TYPES = frozenset({"CPU", "GPU", "TPU", "CUSTOM", "EPU"})


@dataclass(frozen=True)
class DeviceSpec:
    """The parts of a device string; None where the string does not say."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else str(self.device_index)
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    def __str__(self) -> str:
        return self.to_string()


def _int(value: str, what: str, spec: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidArgumentError(f"{what} {value!r} is not an integer in device spec {spec!r}") from None


def parse_device(spec: str) -> DeviceSpec:
    """Parse a device string; raise ``InvalidArgumentError`` (a ``ValueError``) where TF's parser would.

    Examples:
        >>> parse_device("/job:worker/replica:0/task:1/device:CPU:0").to_string()
        '/job:worker/replica:0/task:1/device:CPU:0'
        >>> parse_device("cpu:0").device_type
        'CPU'
    """
    if not isinstance(spec, str):
        raise InvalidArgumentError(f"a device spec must be a string, got {type(spec).__name__}")
    job = replica = task = device_type = device_index = None
    for part in spec.split("/"):
        fields = part.split(":")
        n = len(fields)
        if n == 2 and fields[0] == "job":
            job = fields[1]
        elif n == 2 and fields[0] == "replica":
            replica = _int(fields[1], "replica", spec)
        elif n == 2 and fields[0] == "task":
            task = _int(fields[1], "task", spec)
        elif n in (1, 2) and fields[0].upper() in _DEVICE_TYPES:
            if device_type is not None:
                raise InvalidArgumentError(
                    f"Multiple device types are not allowed while parsing the device spec: {spec}."
                )
            device_type = fields[0].upper()
            if n == 2 and fields[1] != "*":
                device_index = _int(fields[1], "device index", spec)
        elif n == 3 and fields[0] == "device":
            if device_type is not None:
                raise InvalidArgumentError(
                    f"Multiple device types are not allowed while parsing the device spec: {spec}."
                )
            device_type = fields[1]
            if fields[2] != "*":
                device_index = _int(fields[2], "device index", spec)
        elif fields[0] != "":
            raise InvalidArgumentError(
                f"Unknown attribute '{fields[0]}' is encountered while parsing the device spec: '{spec}'."
            )
    return DeviceSpec(job, replica, task, device_type, device_index)
