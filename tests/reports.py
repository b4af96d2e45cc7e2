"""Hand-written neuron-monitor reports for tests, in the documented format (telemetry reference
section 1.9), small enough to check every figure by hand."""

import json

GIB = 1 << 30


def core_memory(tensors=1 * GIB, constants=2 * GIB, model_code=256 << 20, scratchpad=512 << 20, runtime=64 << 20):
    return {
        "constants": constants,
        "model_code": model_code,
        "model_shared_scratchpad": scratchpad,
        "runtime_memory": runtime,
        "tensors": tensors,
    }


def runtime(
    pid,
    tag,
    cores,
    util=None,
    memory=None,
    counters_error="",
    memory_error="",
    executions=None,
    physical_key=None,
    flops=50_000_000_000_000,
):
    """One runtime entry owning `cores` (global logical indices) with per-core util and memory."""
    util = util or {}
    memory = memory or {c: core_memory() for c in cores}
    in_use = {}
    for core, pct in util.items():
        entry = {"neuroncore_utilization": pct, "flops": flops}
        if physical_key:
            family = physical_key[:-1]  # "v4d" -> "v4"
            entry[physical_key] = {
                f"nc_{family}.{2 * core}": {"neuroncore_utilization": pct},
                f"nc_{family}.{2 * core + 1}": {"neuroncore_utilization": pct},
            }
        in_use[str(core)] = entry
    device_total = sum(sum(m.values()) for m in memory.values())
    report = {
        "neuroncore_counters": {"period": 1.000187, "neuroncores_in_use": in_use, "error": counters_error},
        "memory_used": {
            "period": 1.00031,
            "neuron_runtime_used_bytes": {
                "host": 44023414784,
                "neuron_device": device_total,
                "usage_breakdown": {
                    "host": {"application_memory": 43486543872, "constants": 0, "dma_buffers": 536870912, "tensors": 0},
                    "neuroncore_memory_usage": {str(c): m for c, m in memory.items()},
                },
            },
            "loaded_models": [
                {
                    "name": "model.MODULE_9182736455+e30acd3a.neff",
                    "uuid": "5c1f0e9a7b3d4f21a8c6e0d94b2a7f13",
                    "model_id": 10012,
                    "is_running": True,
                    "subgraphs": {
                        "sg_00": {
                            "memory_used_bytes": {
                                "host": 24576,
                                "neuron_device": 10076127232,
                                "usage_breakdown": {"host": {}, "neuron_device": {}},
                            },
                            "neuroncore_index": cores[0],
                            "neuron_device_index": 0,
                        }
                    },
                }
            ],
            "error": memory_error,
        },
        "neuron_runtime_vcpu_usage": {"period": 1.000199, "vcpu_usage": {"user": 6.42, "system": 1.87}, "error": ""},
    }
    if executions is not None:
        report["execution_stats"] = executions
    return {"pid": pid, "neuron_runtime_tag": tag, "error": "", "report": report}


def executions(generic=0, completed=3, hardware=0, error="", latency=True, timed_out=0):
    lat = {"p0": 0.0121, "p1": 0.0121, "p25": 0.0124, "p50": 0.3411, "p75": 0.6032, "p99": 0.604, "p100": 0.604}
    return {
        "period": 1.000402,
        "error_summary": {
            "generic": generic,
            "numerical": 0,
            "transient": 0,
            "model": 0,
            "runtime": 0,
            "hardware": hardware,
        },
        "execution_summary": {
            "completed": completed,
            "completed_with_err": 0,
            "completed_with_num_err": 0,
            "timed_out": timed_out,
            "incorrect_input": 0,
            "failed_to_queue": 0,
        },
        "latency_stats": {"total_latency": lat if latency else None, "device_latency": lat if latency else None},
        "error": error,
    }


def hardware_trn3(chips=2, lnc=2):
    return {
        "neuron_device_type": "trainium3",
        "neuroncore_version": "v4d" if lnc == 2 else "v4",
        "neuron_device_count": chips,
        "neuron_device_memory_size": 144 * GIB,
        "neuroncore_per_device_count": 8 // lnc,
        "logical_neuroncore_config": lnc,
        "error": "",
    }


def hardware_trn2(chips=2, lnc=2):
    return {
        "neuron_device_type": "trainium2",
        "neuron_device_version": "v4",
        "neuroncore_version": "v3d" if lnc == 2 else "v3",
        "neuron_device_count": chips,
        "neuron_device_memory_size": 96 * GIB,
        "neuroncore_per_device_count": 8 // lnc,
        "logical_neuroncore_config": lnc,
        "error": "",
    }


def system(chips=2, ecc=None, vcpus=4):
    ecc = ecc or {}
    return {
        "neuron_hw_counters": {
            "period": 1.0012,
            "neuron_devices": [
                {
                    "neuron_device_index": d,
                    "mem_ecc_corrected": ecc.get(d, 0),
                    "mem_ecc_uncorrected": 0,
                    "sram_ecc_corrected": 0,
                    "sram_ecc_uncorrected": 0,
                }
                for d in range(chips)
            ],
            "error": "",
        },
        "vcpu_usage": {
            "period": 1.0002,
            "average_usage": {
                "user": 11.84,
                "nice": 0.0,
                "system": 3.02,
                "idle": 85.01,
                "io_wait": 0.09,
                "irq": 0.0,
                "soft_irq": 0.04,
            },
            "usage_data": {
                str(i): {"user": 10.0, "nice": 0, "system": 2.0, "idle": 88.0, "io_wait": 0, "irq": 0, "soft_irq": 0}
                for i in range(vcpus)
            },
            "context_switch_count": 412877,
            "error": "",
        },
        "memory_info": {
            "period": 1.0011,
            "memory_total_bytes": 824633720832,
            "memory_used_bytes": 211106232320,
            "swap_total_bytes": 0,
            "swap_used_bytes": 0,
            "error": "",
        },
    }


def instance(instance_id="i-0a1b2c3d4e5f60718", instance_type="trn3pds.16xlarge", ultraserver_id=None):
    info = {
        "instance_name": "",
        "instance_id": instance_id,
        "instance_type": instance_type,
        "instance_availability_zone": "us-east-2b",
        "instance_availability_zone_id": "use2-az2",
        "instance_region": "us-east-2",
        "ami_id": "ami-0123456789abcdef0",
        "subnet_id": "subnet-0abc1234",
        "error": "",
    }
    if ultraserver_id is not None:
        info["ultraserver_id"] = ultraserver_id
    return info


def report(runtimes, hardware=None, system_data=None, instance_info=None):
    return {
        "neuron_runtime_data": runtimes,
        "system_data": system_data if system_data is not None else system(),
        "instance_info": instance_info or instance(),
        "neuron_hardware_info": hardware or hardware_trn3(),
    }


def line(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))
