"""Bounds on every size, count, index, index and key set that a host report (neuron-monitor or exporter) carries.

One place for both decoders (collectors/neuron_monitor.py, collectors/prometheus.py) and the
fold (ledger/hosts.py). Each bound is several times the largest host documented for Neuron
(neuron-telemetry.md sections 1.5 and 6: 16 chips x 8 logical cores at LNC=1 on trn2.48xlarge
and on a Trn3 Gen1 server, 192 vCPUs), so no real report comes near one; past a bound a value
is rejected (docs/contracts.md, "Input limits and bad lines") instead of sizing memory or time by it.
"""

# Topology of one host.
MAX_DEVICES_PER_HOST = 64  # neuron_device_count, and a device index is below it; 16 is the largest known
MAX_CORES_PER_DEVICE = 32  # neuroncore_per_device_count, logical or physical; Trn3: 8 physical, 4 logical at LNC=2
MAX_CORE_INDEX = MAX_DEVICES_PER_HOST * MAX_CORES_PER_DEVICE - 1  # a core index is global on the host
MAX_DEVICE_MEMORY_BYTES = 2**44  # neuron_device_memory_size; Trn3: 144 GiB; sums stay exact in floats
MAX_LNC = 8  # logical_neuroncore_config; 1 or 2 today
MAX_PHYSICAL_PER_CORE = 8  # entries of a core's per-physical split (v3d / v4d); 2 at LNC=2
MAX_VCPUS_PER_HOST = 4096  # usage_data entries, and a vCPU index is below it; 192 is the largest known

# Runtimes (Neuron processes) and what each one carries.
MAX_RUNTIMES_PER_REPORT = 512  # neuron_runtime_data entries; at most one per core (128) in practice
MAX_RUNTIMES_PER_HOST = 1024  # runtimes kept per host; the least recently seen beyond it are evicted
# Runtimes kept across all hosts of a session: 32 a host at MAX_HOSTS (a Trn3 Gen2 host at LNC=2
# runs 16, one per logical core). Past it a host's new runtimes are not kept (counted per host as
# `runtimes-over-budget`), so a stream of fresh instance ids and pids cannot grow memory by host
# count x runtimes (about 2 KB each: 256 MiB at most; tests/benchmarks/bench_memory.py).
MAX_RUNTIMES_TOTAL = 131_072
# A runtime missing from this many consecutive report periods (and at least RUNTIME_EVICT_MIN_S) is
# evicted from the host: a restarted job comes back under new pids, so old ones would pile up.
RUNTIME_EVICT_PERIODS = 60
RUNTIME_EVICT_MIN_S = 60.0
MAX_LOADED_MODELS = 64  # loaded_models entries per runtime (one NEFF per pipeline stage or graph)
MAX_SUBGRAPHS = 256  # subgraphs per loaded model
MAX_MODEL_NAME_CHARS = 256  # a NEFF name ("model.MODULE_<hash>+<hash>.neff" is ~50)
MAX_NAMED_VALUES = 64  # keys of a named-value map: counters, percentiles, memory categories, usage fields
# Counter names one runtime (or chip) keeps across reports; execution_stats has 12 documented.
MAX_COUNTERS_PER_FAMILY = 2 * MAX_NAMED_VALUES

# Scalars.
MAX_PID = 1 << 22  # Linux PID_MAX_LIMIT (4,194,304)
MAX_INT = (1 << 63) - 1  # counts, bytes, ids: whatever a 64-bit producer can write
MAX_FLOPS = 1e21  # per second, per core: ~10^6 x a Trainium3 core's 315 dense MXFP8 TFLOPS
MAX_PERIOD_S = 86_400.0  # a group's measured period
MAX_LATENCY_S = 86_400.0  # a latency percentile
MAX_TAG_CHARS = 255  # NEURON_PROCESS_TAG is documented as at most 255 characters
MAX_TEXT_CHARS = 4096  # names, ids, types and error strings

# Hosts one ledger keeps (instance ids come from reports): 1,152 hosts = 32 Gen2 UltraServers.
MAX_HOSTS = 4096
