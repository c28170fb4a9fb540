"""NumaplaceFilter and NumaplaceWeigher loaded by Nova's own handlers from
configuration and run on Nova's own HostState and RequestSpec objects,
against a running numaplace serve; the claim endpoint on Nova's
notification payloads."""

import uuid

import pytest
from nova import conf as nova_conf
from nova import objects
from nova.scheduler import filters as nova_filters
from nova.scheduler import host_manager
from nova.scheduler import weights as nova_weights

from numaplace_nova import conf as np_conf
from numaplace_nova import notifications, translate
from numaplace_nova.filters import NumaplaceFilter

objects.register_all()
CONF = nova_conf.CONF
CELL = str(uuid.uuid4())


@pytest.fixture(autouse=True)
def configured(server):
    CONF([], project="nova", default_config_files=[])
    np_conf.register(CONF)
    CONF.set_override("url", server.url, group="numaplace")
    CONF.set_override("available_filters", ["nova.scheduler.filters.all_filters",
                                            "numaplace_nova.filters.NumaplaceFilter"],
                      group="filter_scheduler")
    CONF.set_override("enabled_filters", ["NumaplaceFilter"], group="filter_scheduler")
    CONF.set_override("weight_classes", ["numaplace_nova.weighers.NumaplaceWeigher"], group="filter_scheduler")
    yield
    CONF.reset()


def hosts():
    return [host_manager.HostState(h, h, CELL) for h in ("corona", "quartz")]


def spec(vcpus, memory_mb, extra_specs=None, image_props=None):
    return objects.RequestSpec(
        flavor=objects.Flavor(vcpus=vcpus, memory_mb=memory_mb, root_gb=1, ephemeral_gb=0, swap=0,
                              name="f%d" % vcpus, extra_specs=extra_specs or {}),
        image=objects.ImageMeta(properties=objects.ImageMetaProps(**(image_props or {}))),
        instance_uuid=str(uuid.uuid4()), num_instances=1, scheduler_hints={})


def loaded_filters():
    handler = nova_filters.HostFilterHandler()
    classes = handler.get_matching_classes(CONF.filter_scheduler.available_filters)
    by_name = {c.__name__: c for c in classes}
    assert "NumaplaceFilter" in by_name, "Nova's loader did not find the class from the dotted path"
    return handler, [by_name[n]() for n in CONF.filter_scheduler.enabled_filters]


def run_filters(s):
    handler, filters = loaded_filters()
    passed = handler.get_filtered_objects(filters, hosts(), s, index=0)
    return [h.host for h in (passed or [])], filters[0]


def test_a_flavor_that_fits_passes_both_hosts():
    passed, _ = run_filters(spec(4, 8192, {"hw:cpu_policy": "dedicated"}))
    assert passed == ["corona", "quartz"]


def test_a_flavor_only_one_host_holds_refuses_the_other_with_the_services_reason():
    passed, f = run_filters(spec(40, 65536, {"hw:cpu_policy": "dedicated"}))
    assert passed == ["corona"]
    # quartz has 36 threads: the service's typed reason, with its figures.
    assert f.last_reasons["quartz"].startswith("short-threads:"), f.last_reasons
    assert "needs 40 free CPU threads, has 36" in f.last_reasons["quartz"]


def test_a_dedicated_numa_flavor_is_translated_exactly():
    specs = {
        "hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0-1",
        "hw:cpu_thread_policy": "isolate", "hw:emulator_threads_policy": "isolate",
        "hw:numa_nodes": "2", "hw:numa_cpus.0": "0,2,4,6", "hw:numa_mem.0": "4096",
        "hw:numa_cpus.1": "1,3,5,7", "hw:numa_mem.1": "4096", "hw:mem_page_size": "2MB",
        "hw:cpu_sockets": "2",
    }
    s = spec(8, 8192, specs)
    assert translate.request_for_spec(s) == {
        "name": s.instance_uuid, "vcpus": 8, "memory": "8192MiB", "cpu": "dedicated",
        "shared_vcpus": "0,1", "smt": "isolate", "emulator": "isolate",
        "cells": [{"vcpus": [0, 2, 4, 6], "memory": "4096MiB"}, {"vcpus": [1, 3, 5, 7], "memory": "4096MiB"}],
        "hugepages": "2MiB",
    }
    # The image's hw_* properties are read the same way when the flavor is
    # silent; the flavor's win.
    img = spec(4, 4096, {"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated", "hw_numa_nodes": 2})
    assert translate.request_for_spec(img)["cpu"] == "shared"
    assert translate.request_for_spec(img)["guest_nodes"] == 2


def test_a_property_numaplace_cannot_honour_refuses_every_host_by_name():
    passed, f = run_filters(spec(4, 4096, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}))
    assert passed == []
    assert all("hw:mem_page_size=large" in why for why in f.last_reasons.values()), f.last_reasons
    passed, f = run_filters(spec(4, 4096, {"hw:cpu_realtime": "yes"}))
    assert passed == [] and "hw:cpu_realtime" in f.last_reasons["corona"]


def test_the_weigher_ranks_first_the_host_the_service_would_choose(server):
    handler = nova_weights.HostWeightHandler()
    classes = handler.get_matching_classes(CONF.filter_scheduler.weight_classes)
    s = spec(16, 32768, {"hw:cpu_policy": "dedicated"})
    weighed = handler.get_weighed_objects([c() for c in classes], hosts(), s)
    vm = translate.request_for_spec(s)
    status, placed = server.call("POST", "/v1/placements?dry_run=true", vm)
    assert status == 200, placed
    assert weighed[0].obj.host == placed["host"]
    assert weighed[0].weight > weighed[1].weight


def test_the_service_down_fails_closed_by_default_and_open_when_asked():
    CONF.set_override("url", "http://127.0.0.1:9", group="numaplace")
    passed, f = run_filters(spec(2, 2048))
    assert passed == [] and "numaplace" in f.last_reasons["corona"]
    CONF.set_override("fail_open", True, group="numaplace")
    passed, _ = run_filters(spec(2, 2048))
    assert passed == ["corona", "quartz"]


def payload(uuid_, host, vcpus, memory_mb, extra_specs):
    # The shape of Nova's versioned InstanceCreatePayload, as
    # oslo.messaging delivers it.
    return {"nova_object.name": "InstanceCreatePayload", "nova_object.namespace": "nova",
            "nova_object.data": {
                "uuid": uuid_, "host": host, "node": host,
                "flavor": {"nova_object.name": "FlavorPayload", "nova_object.data": {
                    "vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": extra_specs}}}}


def test_a_failed_boot_releases_the_claim(server):
    ep = notifications.ClaimEndpoint()
    u = str(uuid.uuid4())
    p = payload(u, "quartz", 30, 16384, {"hw:cpu_policy": "dedicated"})
    assert ep.handle("instance.create.start", p) == "claimed"
    status, placed = server.call("GET", "/v1/placements/" + u)
    assert status == 200 and placed["host"] == "quartz"
    assert len(placed["placement"]["pins"]) == 30
    # While claimed, quartz cannot take another 30 dedicated vCPUs.
    passed, f = run_filters(spec(30, 16384, {"hw:cpu_policy": "dedicated"}))
    assert passed == ["corona"], f.last_reasons
    # The boot fails: Nova sends instance.create.error at ERROR priority.
    ep.error({}, "nova-compute:quartz", "instance.create.error", p, {})
    status, _ = server.call("GET", "/v1/placements/" + u)
    assert status == 404
    passed, _ = run_filters(spec(30, 16384, {"hw:cpu_policy": "dedicated"}))
    assert passed == ["corona", "quartz"]
    # The same notification delivered twice: the first answer, no second
    # change (its Idempotency-Key); an error from the host a reschedule
    # tried next finds nothing to release.
    assert ep.handle("instance.create.error", p) == "released"
    assert ep.handle("instance.create.error", payload(u, "corona", 30, 16384, {})) == "nothing"


class LostAnswers:
    """A client whose first answer of each call is lost after the
    service made the change, as a dropped connection loses it."""

    def __init__(self, inner):
        self.inner = inner
        self.lost = set()

    def _lose_once(self, what, call):
        result = call()
        if what not in self.lost:
            self.lost.add(what)
            from numaplace_nova.client import ServiceError
            raise ServiceError("connection reset after the request was sent")
        return result

    def claim(self, vm, host, key=None):
        return self._lose_once("claim", lambda: self.inner.claim(vm, host, key=key))

    def release(self, name, key=None):
        return self._lose_once("release", lambda: self.inner.release(name, key=key))


def test_a_claim_whose_answer_was_lost_is_retried_under_its_key_and_made_once(server):
    from numaplace_nova.client import Client
    inner = Client(server.url)
    ep = notifications.ClaimEndpoint(client=LostAnswers(inner))
    u = str(uuid.uuid4())
    p = payload(u, "corona", 4, 4096, {"hw:cpu_policy": "dedicated"})
    # The claim was made, its answer lost; the retry gets the first answer.
    assert ep.handle("instance.create.start", p) == "claimed"
    status, placed = server.call("GET", "/v1/placements/" + u)
    assert status == 200 and placed["host"] == "corona"
    status, page = server.call("GET", "/v1/placements?host=corona")
    assert [v["placement"]["vm"] for v in page["placements"]].count(u) == 1
    # The release likewise: made once, and said so, not "nothing".
    assert ep.handle("instance.delete.end", p) == "released"
    assert server.call("GET", "/v1/placements/" + u)[0] == 404


def test_a_claim_the_service_never_answers_is_unknown_not_failed():
    from numaplace_nova.client import Client
    ep = notifications.ClaimEndpoint(client=Client("http://127.0.0.1:9", timeout=0.2))
    p = payload(str(uuid.uuid4()), "corona", 2, 2048, {})
    assert ep.handle("instance.create.start", p) == "unknown"
