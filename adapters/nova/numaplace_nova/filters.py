"""``NumaplaceFilter``: a Nova host filter asking numaplace's fleet service
whether each candidate host can take the instance, NUMA nodes and CPUs
included, by the same planner that later makes the claim.

nova.conf::

    [filter_scheduler]
    available_filters = nova.scheduler.filters.all_filters
    available_filters = numaplace_nova.filters.NumaplaceFilter
    enabled_filters = ComputeFilter,NumaplaceFilter

Hosts are asked in one call for the whole candidate list (``filter_all``),
not one call a host.
"""

import logging

from nova.scheduler import filters

from numaplace_nova import client as client_mod
from numaplace_nova import conf as conf_mod
from numaplace_nova import translate

LOG = logging.getLogger(__name__)


def make_client():
    opts = conf_mod.register()
    return client_mod.Client(opts.url, timeout=opts.timeout)


class NumaplaceFilter(filters.BaseHostFilter):
    """Passes the hosts numaplace's planner can place the instance on."""

    # The answer depends on the host's free CPUs, which a rebuild on the
    # same host does not change.
    RUN_ON_REBUILD = False

    def __init__(self):
        super().__init__()
        self.last_reasons = {}

    def filter_all(self, filter_obj_list, spec_obj):
        hosts = list(filter_obj_list)
        if not hosts:
            return []
        from nova.scheduler import utils
        if utils.request_is_rebuild(spec_obj):
            return hosts
        opts = conf_mod.register()
        try:
            vm = translate.request_for_spec(spec_obj)
        except translate.Untranslatable as e:
            LOG.info("NumaplaceFilter: every host refused: %s", e)
            self.last_reasons = {h.host: str(e) for h in hosts}
            return []
        try:
            verdicts = make_client().evaluate(vm, [h.host for h in hosts])
        except client_mod.ServiceError as e:
            if opts.fail_open:
                LOG.warning("NumaplaceFilter: %s; passing every host (fail_open)", e)
                self.last_reasons = {}
                return hosts
            LOG.error("NumaplaceFilter: %s; refusing every host (fail_open is false)", e)
            self.last_reasons = {h.host: str(e) for h in hosts}
            return []
        passed, self.last_reasons = [], {}
        for h, v in zip(hosts, verdicts):
            if v.get("fits"):
                passed.append(h)
            else:
                r = v.get("refused") or {}
                why = "%s: %s" % (r.get("code", "refused"), r.get("message", ""))
                self.last_reasons[h.host] = why
                LOG.info("NumaplaceFilter: host %s refused for instance %s: %s", h.host, vm["name"], why)
        return passed

    def host_passes(self, host_state, spec_obj):
        return bool(list(self.filter_all([host_state], spec_obj)))
