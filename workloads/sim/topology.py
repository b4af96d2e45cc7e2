"""Shapes of the simulated fleets: UltraServer -> host -> chip -> NeuronCore.

Published figures (neuron-telemetry.md section 6): a Trn3 Gen2 UltraServer is 36 servers x 4
chips, Gen1 is 4 x 16; a Trainium3 chip has 8 physical NeuronCore-v4 and 144 GiB HBM; LNC=2 is the
default (4 logical cores per chip). Trn2: 16 chips per trn2.48xlarge, 96 GiB HBM, 192 vCPU,
2048 GiB host memory; a Trn2 UltraServer is 4 x trn2u.48xlarge.

Everything the simulator emits that AWS has not published for Trn3 is listed in `ASSUMPTIONS`,
and nowhere else: code that consumes these reports must treat those values as data.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30

ASSUMPTIONS: dict[str, str] = {
    "neuron_device_type": '"trainium3" on Trn3, by analogy with "trainium2"; no Trn3 sample is published.',
    "neuroncore_version": '"v4d" at LNC=2 and "v4" at LNC=1 on Trn3, by analogy with Trn2 "v3d"/"v3".',
    "per-physical breakdown": 'Trn3 at LNC=2 emits key "v4d" with entries "nc_v4.<n>" (n = 2k, 2k+1 for logical '
    'core k), by analogy with Trn2 "v3d"/"nc_v3.<n>".',
    "instance_type": '"trn3pds.16xlarge" for a Gen2 server (EKS calls the type "Trn3pds"; 16xlarge from its '
    '64 vCPU) and "trn3p.48xlarge" for a Gen1 server (driver maps it to ULTRASERVER). Neither is confirmed.',
    "host vCPU / memory": "Trn3 per-server vCPU and memory are AWS's UltraServer totals divided by the "
    "server count (Gen2: 64 vCPU, 768 GiB; Gen1: 192 vCPU, 2048 GiB).",
    "instance_info.ultraserver_id": "present only on UltraServer topologies (seen in AWS CloudWatch-agent "
    'fixtures, undocumented); its value format here ("us-0sim" + hex, shared by the hosts of one '
    "simulated UltraServer) is invented.",
    "neuron_device_memory_size": "exactly 144 GiB on Trn3; real firmware may reserve some of it.",
    "EFA devices": "one EFA device per chip, named rdmap<16 + chip>s27 (host_sysfs.py); AWS publishes no "
    "per-server EFA device count or PCI layout for Trn3.",
}


@dataclass(frozen=True)
class Topology:
    """One simulated fleet shape. Core counts are logical unless the name says physical."""

    name: str
    hosts: int
    chips_per_host: int
    physical_cores_per_chip: int
    lnc: int  # logical NeuronCore config: physical cores per logical core
    core_family: str  # "v4" (NeuronCore-v4, Trn3) or "v3" (NeuronCore-v3, Trn2)
    device_type: str
    instance_type: str
    hbm_bytes_per_chip: int
    host_vcpus: int
    host_memory_bytes: int
    is_ultraserver: bool
    bf16_flops_per_physical_core: float  # peak, used to scale the emitted flops

    @property
    def cores_per_chip(self) -> int:
        """Logical NeuronCores per chip (`neuroncore_per_device_count`)."""
        return self.physical_cores_per_chip // self.lnc

    @property
    def neuroncore_version(self) -> str:
        """Exposed core type: "v4d"/"v3d" at LNC=2, "v4"/"v3" at LNC=1."""
        return self.core_family + ("d" if self.lnc == 2 else "")

    @property
    def chips(self) -> int:
        """Chips in the whole topology."""
        return self.hosts * self.chips_per_host


_TRN3_CHIP: dict[str, Any] = dict(
    physical_cores_per_chip=8,
    lnc=2,
    core_family="v4",
    device_type="trainium3",
    hbm_bytes_per_chip=144 * GIB,
    bf16_flops_per_physical_core=79e12,
)
_TRN2_CHIP: dict[str, Any] = dict(
    physical_cores_per_chip=8,
    lnc=2,
    core_family="v3",
    device_type="trainium2",
    hbm_bytes_per_chip=96 * GIB,
    bf16_flops_per_physical_core=667e12 / 8,
)

TOPOLOGIES: dict[str, Topology] = {
    t.name: t
    for t in (
        Topology(
            name="trn3-gen2-us",
            hosts=36,
            chips_per_host=4,
            instance_type="trn3pds.16xlarge",
            host_vcpus=64,
            host_memory_bytes=768 * GIB,
            is_ultraserver=True,
            **_TRN3_CHIP,
        ),
        Topology(
            name="trn3-gen1-us",
            hosts=4,
            chips_per_host=16,
            instance_type="trn3p.48xlarge",
            host_vcpus=192,
            host_memory_bytes=2048 * GIB,
            is_ultraserver=True,
            **_TRN3_CHIP,
        ),
        Topology(
            name="trn2.48xlarge",
            hosts=1,
            chips_per_host=16,
            instance_type="trn2.48xlarge",
            host_vcpus=192,
            host_memory_bytes=2048 * GIB,
            is_ultraserver=False,
            **_TRN2_CHIP,
        ),
        Topology(
            name="trn2-us",
            hosts=4,
            chips_per_host=16,
            instance_type="trn2u.48xlarge",
            host_vcpus=192,
            host_memory_bytes=2048 * GIB,
            is_ultraserver=True,
            **_TRN2_CHIP,
        ),
    )
}


def get_topology(name: str, lnc: int | None = None) -> Topology:
    """The named topology, optionally at another LNC (1 or 2); raises ValueError if unknown."""
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}; known: {', '.join(TOPOLOGIES)}")
    topology = TOPOLOGIES[name]
    if lnc is None or lnc == topology.lnc:
        return topology
    if lnc not in (1, 2):
        raise ValueError(f"lnc must be 1 or 2, not {lnc}")
    return dataclasses.replace(topology, lnc=lnc)
