"""Times OpenStack Nova's NUMA fit for the comparison in docs/performance.md.

Runs `nova.virt.hardware.numa_fit_instance_to_host` for a 2-vCPU guest with
dedicated (pinned) CPUs and 2 GiB on an empty host of 8 NUMA cells, each of
16 cores x 2 threads and 64 GiB: the host of numaplace's end-to-end bench.
Prints one JSON line: the median and the best of several runs, in
microseconds per call.

It also times the like-for-like case, `fill_mean_us`: the same 128 VMs that
numaplace's bench places, one after another on one host, each call made on
the host as the earlier calls left it (the usage recorded with
`numa_usage_from_instance_numa`, as Nova's resource tracker does, outside
the timing). numaplace's marginal cost is the mean over such a fill, and
Nova's calls grow dearer as cells fill, so this is the figure to divide by;
the empty-host figure is kept as the harder bar. Needs the `nova` package (scripts/bench-vs-nova
installs it into a virtualenv); this file is not part of numaplace's build.
"""

import json
import statistics
import sys
import time
import warnings

warnings.simplefilter("ignore")

from nova import objects  # noqa: E402
from nova.objects import fields  # noqa: E402
from nova.virt import hardware  # noqa: E402

objects.register_all()

NODES, CORES, THREADS, MIB = 8, 16, 2, 64 * 1024


def host():
    cells = []
    pus = NODES * CORES
    for n in range(NODES):
        # Linux numbering: core c's threads are c and c + all cores.
        cores = range(n * CORES, (n + 1) * CORES)
        siblings = [{c, c + pus} for c in cores]
        cpus = set().union(*siblings)
        cells.append(
            objects.NUMACell(
                id=n,
                cpuset=set(),
                pcpuset=cpus,
                memory=MIB,
                cpu_usage=0,
                memory_usage=0,
                pinned_cpus=set(),
                siblings=siblings,
                mempages=[objects.NUMAPagesTopology(size_kb=4, total=MIB * 256, used=0)],
                network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False),
                socket=n // 4,
            )
        )
    return objects.NUMATopology(cells=cells)


def guest():
    cell = objects.InstanceNUMACell(
        id=0, cpuset=set(), pcpuset={0, 1}, memory=2048, cpu_policy=fields.CPUAllocationPolicy.DEDICATED
    )
    return objects.InstanceNUMATopology(cells=[cell])


BATCH = 128


def fill(g):
    """Mean microseconds per call over one fill of BATCH VMs."""
    h = host()
    spent = 0.0
    for i in range(BATCH):
        start = time.perf_counter()
        fitted = hardware.numa_fit_instance_to_host(h, g, None)
        spent += time.perf_counter() - start
        if fitted is None:
            sys.exit(f"nova found no fit for VM {i} of {BATCH}: the bench is wrong")
        h = hardware.numa_usage_from_instance_numa(h, fitted)
    return spent / BATCH * 1e6


def main():
    h, g = host(), guest()
    fitted = hardware.numa_fit_instance_to_host(h, g, None)
    if fitted is None:
        sys.exit("nova found no fit on an empty host: the bench is wrong")
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    runs = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            hardware.numa_fit_instance_to_host(h, g, None)
        runs.append((time.perf_counter() - start) / calls * 1e6)
    fill(g)  # warm up
    fills = [fill(g) for _ in range(max(3, calls // 20))]
    print(json.dumps({"peer": "nova", "version": __import__("nova.version").version.version_string(),
                      "calls": calls, "median_us": statistics.median(runs), "best_us": min(runs),
                      "fill_vms": BATCH, "fills": len(fills), "fill_mean_us": statistics.median(fills)}))


if __name__ == "__main__":
    main()
