"""A Nova flavor and image, read as a numaplace VM request.

Each NUMA property Nova honours is translated exactly, or refused by name:
a property numaplace cannot honour makes every host fail the filter with
that property's name in the reason, never silently dropped (a VM Nova
places by rules numaplace did not check would be pinned wrongly).
"""

# Keys that shape only the guest's CPU topology, which Nova writes into
# the domain itself: numaplace decides host nodes and CPUs, not these.
LEFT_TO_NOVA = (
    "hw:cpu_sockets", "hw:cpu_cores", "hw:cpu_threads",
    "hw:cpu_max_sockets", "hw:cpu_max_cores", "hw:cpu_max_threads",
    # Encryption changes how memory is mapped, not where it is.
    "hw:mem_encryption", "hw:mem_encryption_model",
)

# Families of keys about CPU, NUMA, memory and PCI placement: any key of
# these numaplace does not translate refuses the host by name.
PLACEMENT_FAMILIES = ("hw:cpu_", "hw:numa_", "hw:mem_", "hw:emulator_", "hw:pci_")


class Untranslatable(Exception):
    """A property numaplace cannot honour, named."""


def parse_cpu_list(text, vcpus, prop):
    """Nova's CPU list syntax (``0-3,^2``, ``^0-1``) over ``range(vcpus)``."""
    include, exclude = set(), set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        target = include
        if part.startswith("^"):
            target, part = exclude, part[1:]
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError
                target.update(range(lo, hi + 1))
            else:
                target.add(int(part))
        except ValueError:
            raise Untranslatable("%s=%s: expected a CPU list such as 0-3,^2" % (prop, text)) from None
    if not include:
        include = set(range(vcpus))
    chosen = include - exclude
    if any(c >= vcpus or c < 0 for c in chosen):
        raise Untranslatable("%s=%s: names a vCPU the flavor's %d lack" % (prop, text, vcpus))
    return sorted(chosen)


def _list_text(cpus):
    return ",".join(str(c) for c in cpus)


def page_size(value, prop):
    """``hw:mem_page_size`` as bytes, or None for small/any pages."""
    v = str(value).strip().lower()
    if v in ("small", "any"):
        return None
    if v == "large":
        raise Untranslatable(
            "%s=large: numaplace needs the page size (2MB or 1GB), as it "
            "plans the pages of one size per node" % prop)
    units = {"kb": 1 << 10, "k": 1 << 10, "mb": 1 << 20, "m": 1 << 20,
             "gb": 1 << 30, "g": 1 << 30, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
    num = v.rstrip("kmgib")
    unit = v[len(num):]
    try:
        n = int(num)
    except ValueError:
        raise Untranslatable("%s=%s: expected small, any, or a size such as 2MB" % (prop, value)) from None
    # A bare number is KiB, as Nova reads it.
    size = n * units.get(unit, 1 << 10) if unit else n << 10
    if size not in (2 << 20, 1 << 30):
        raise Untranslatable("%s=%s: numaplace plans 2 MiB and 1 GiB pages" % (prop, value))
    return size


def _image_props(image):
    """The image's set ``hw_*`` properties as a dict."""
    if image is None:
        return {}
    if isinstance(image, dict):
        return dict(image)
    props = getattr(image, "properties", None)
    if props is None:
        return {}
    out = {}
    for name in props.fields:
        if props.obj_attr_is_set(name):
            out[name] = getattr(props, name)
    return out


def _get(specs, image, key):
    """A flavor extra spec, else the image's ``hw_`` equivalent (as Nova
    reads most NUMA properties: the flavor's wins)."""
    if key in specs:
        return specs[key], key
    img_key = key.replace(":", "_")
    if img_key in image:
        return image[img_key], img_key
    return None, key


def request_from(name, vcpus, memory_mb, extra_specs, image=None):
    """The numaplace request (a dict, as ``POST /v1/placements`` takes it)
    for a flavor's figures and extra specs and an image's properties;
    raises Untranslatable naming the property it cannot honour."""
    specs = dict(extra_specs or {})
    image = _image_props(image)
    req = {"name": name, "vcpus": int(vcpus), "memory": "%dMiB" % int(memory_mb)}
    handled = set(LEFT_TO_NOVA)

    policy, prop = _get(specs, image, "hw:cpu_policy")
    handled.add("hw:cpu_policy")
    policy = (policy or "shared").lower()
    if policy == "dedicated":
        req["cpu"] = "dedicated"
    elif policy == "shared":
        req["cpu"] = "shared"
    elif policy == "mixed":
        req["cpu"] = "dedicated"
        mask, mprop = _get(specs, image, "hw:cpu_dedicated_mask")
        handled.add("hw:cpu_dedicated_mask")
        if mask is None:
            raise Untranslatable("%s=mixed: needs hw:cpu_dedicated_mask" % prop)
        dedicated = parse_cpu_list(mask, req["vcpus"], mprop)
        shared = [c for c in range(req["vcpus"]) if c not in dedicated]
        if not dedicated or not shared:
            raise Untranslatable("%s=%s: a mixed VM needs dedicated and shared vCPUs" % (mprop, mask))
        req["shared_vcpus"] = _list_text(shared)
    else:
        raise Untranslatable("%s=%s: expected dedicated, shared or mixed" % (prop, policy))

    threads, tprop = _get(specs, image, "hw:cpu_thread_policy")
    handled.add("hw:cpu_thread_policy")
    if threads is not None:
        smt = {"prefer": "pairs", "require": "require", "isolate": "isolate"}.get(str(threads).lower())
        if smt is None:
            raise Untranslatable("%s=%s: expected prefer, require or isolate" % (tprop, threads))
        if req["cpu"] == "dedicated":
            req["smt"] = smt

    emu, eprop = _get(specs, image, "hw:emulator_threads_policy")
    handled.add("hw:emulator_threads_policy")
    if emu is not None:
        e = {"isolate": "isolate", "share": "housekeeping"}.get(str(emu).lower())
        if e is None:
            raise Untranslatable("%s=%s: expected isolate or share" % (eprop, emu))
        req["emulator"] = e

    nodes, nprop = _get(specs, image, "hw:numa_nodes")
    handled.add("hw:numa_nodes")
    if nodes is not None:
        try:
            n = int(nodes)
            if n < 1:
                raise ValueError
        except ValueError:
            raise Untranslatable("%s=%s: expected a whole number of at least 1" % (nprop, nodes)) from None
        cells = []
        for i in range(n):
            cpus, cprop = _get(specs, image, "hw:numa_cpus.%d" % i)
            mem, mprop = _get(specs, image, "hw:numa_mem.%d" % i)
            # An image gives the cells as two lists, not one key a cell.
            if cpus is None and mem is None and "hw_numa_cpus" in image and "hw_numa_mem" in image:
                try:
                    cpus, cprop = image["hw_numa_cpus"][i], "hw_numa_cpus"
                    mem, mprop = image["hw_numa_mem"][i], "hw_numa_mem"
                except IndexError:
                    raise Untranslatable("hw_numa_cpus/hw_numa_mem: expected %d cells" % n) from None
            handled.update(("hw:numa_cpus.%d" % i, "hw:numa_mem.%d" % i))
            if (cpus is None) != (mem is None):
                raise Untranslatable("%s: hw:numa_cpus.%d and hw:numa_mem.%d go together" % (nprop, i, i))
            if cpus is not None:
                if isinstance(cpus, (list, set, tuple)):
                    cpus = _list_text(sorted(cpus))
                listed = parse_cpu_list(cpus, req["vcpus"], cprop)
                try:
                    mem_mb = int(mem)
                except ValueError:
                    raise Untranslatable("%s=%s: expected MiB" % (mprop, mem)) from None
                cells.append({"vcpus": listed, "memory": "%dMiB" % mem_mb})
        if cells and len(cells) != n:
            raise Untranslatable("%s=%d: cells 0 to %d each need hw:numa_cpus and hw:numa_mem" % (nprop, n, n - 1))
        if cells:
            req["cells"] = cells
        elif n > 1:
            req["guest_nodes"] = n
        else:
            req["max_nodes"] = 1

    size, sprop = _get(specs, image, "hw:mem_page_size")
    handled.add("hw:mem_page_size")
    if size is not None:
        b = page_size(size, sprop)
        if b is not None:
            req["hugepages"] = "%dMiB" % (b >> 20) if b < (1 << 30) else "1GiB"

    pci, pprop = _get(specs, image, "hw:pci_numa_affinity_policy")
    handled.add("hw:pci_numa_affinity_policy")
    if pci is not None and specs.get("pci_passthrough:alias"):
        raise Untranslatable(
            "%s=%s with pci_passthrough:alias: numaplace does not know which "
            "host device an alias names" % (pprop, pci))

    for key in sorted(specs):
        if key.startswith(PLACEMENT_FAMILIES) and key not in handled:
            raise Untranslatable("%s=%s: not translated by numaplace" % (key, specs[key]))
    for key in sorted(image):
        nova_key = "hw:" + key[3:] if key.startswith("hw_") else key
        if nova_key in ("hw:numa_cpus", "hw:numa_mem") and nodes is not None:
            continue
        if nova_key.startswith(PLACEMENT_FAMILIES) and nova_key not in handled and nova_key not in specs:
            raise Untranslatable("%s=%s: not translated by numaplace" % (key, image[key]))
    return req


def request_for_spec(spec_obj):
    """The request for a Nova ``RequestSpec``."""
    flavor = spec_obj.flavor
    name = getattr(spec_obj, "instance_uuid", None) or "unnamed"
    image = spec_obj.image if spec_obj.obj_attr_is_set("image") else None
    return request_from(name, flavor.vcpus, flavor.memory_mb, flavor.extra_specs, image)
