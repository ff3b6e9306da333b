"""The machine an engine was measured on, recorded with each engine record: a verdict between engines whose
machines are not shown to be one is refused unless asked for (analysis/machines.py). Two H200 machines of the
same kind served the same engine up to ~15% apart at c=256 (reports/h200-instrument): the machine is part of the
measurement.

`key` says which machine: the UUIDs of the GPUs the engine was given (a physical GPU sits in one host; names do
not tell machines apart: every lent H200 VM is called `vm`), else the kernel's boot id (a CPU machine), else the
serve-bench process. An engine measured on two machines (a resume elsewhere) gets the key "" (not one machine);
so does an older file whose run was resumed. An older file never resumed gets "run <created_at>": one serve-bench
process runs on one machine.

Each load point also carries the key of the machine it was measured on (run.PointResult.machine_key, from
`latest_key` here), so a run resumed on another machine still gives verdicts at the cells whose points of both
engines were all measured on one machine (analysis/machines.cell_difference)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Machine:
    key: str = ""  # what tells machines apart (above); "": not known to be one machine
    hostname: str = ""
    cpu_model: str = ""
    cpu_count: int | None = None
    boot_id: str = ""  # /proc/sys/kernel/random/boot_id
    gpu_name: str = ""  # of the GPUs below ("" on a CPU machine)
    gpu_uuids: list[str] = field(default_factory=list)  # the GPUs the engine was given (its CUDA_VISIBLE_DEVICES)
    server_host: str = "local"  # "local", or the host of an already-running server's base URL (machine not known)
    source: str = "recorded"  # recorded | run host (an older run.json) | why the key is ""
    # the key of the machine of the engine's latest start (its points are stamped with it): `key` unless the record
    # spans machines; "" in files before session 33 (then `key`)
    latest_key: str = ""

    def describe(self) -> str:
        gpus = f"{self.gpu_name} {','.join(u[:12] for u in self.gpu_uuids)}" if self.gpu_uuids else "no GPU UUID"
        boot = f", boot {self.boot_id[:8]}" if self.boot_id else ""
        where = "" if self.server_host == "local" else f", server at {self.server_host}"
        note = "" if self.source == "recorded" else f" [{self.source}]"
        return f"{self.hostname or '?'} ({self.cpu_model or '?'}; {gpus}{boot}){where}{note}"
