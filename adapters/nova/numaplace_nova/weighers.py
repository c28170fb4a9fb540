"""``NumaplaceWeigher``: a Nova weigher from numaplace's verdict on each
host: the host numaplace's own selection would take (most free cores
first, then the planner's expected cost: sibling threads shared, memory
remote to its vCPUs, small guest cells, devices away) weighs most, the
others by that cost.

nova.conf::

    [filter_scheduler]
    weight_classes = nova.scheduler.weights.all_weighers
    weight_classes = numaplace_nova.weighers.NumaplaceWeigher
    numaplace_weight_multiplier = 1.0   # optional, registered here
"""

import logging

from nova.scheduler import weights
from oslo_config import cfg

from numaplace_nova import client as client_mod
from numaplace_nova import conf as conf_mod
from numaplace_nova import translate

LOG = logging.getLogger(__name__)

MULTIPLIER = cfg.FloatOpt("numaplace_weight_multiplier", default=1.0,
                          help="Multiplier of NumaplaceWeigher's weights.")


def _register():
    try:
        cfg.CONF.register_opt(MULTIPLIER, group="filter_scheduler")
    except cfg.DuplicateOptError:
        pass


class NumaplaceWeigher(weights.BaseHostWeigher):
    """Weighs hosts by numaplace's expected cost: the cheaper, the higher."""

    def __init__(self):
        _register()

    def weight_multiplier(self, host_state):
        return cfg.CONF.filter_scheduler.numaplace_weight_multiplier

    def _weigh_object(self, host_state, weight_properties):
        return self.weigh_objects([_Weighed(host_state)], weight_properties)[0]

    def weigh_objects(self, weighed_obj_list, weight_properties):
        hosts = [w.obj for w in weighed_obj_list]
        try:
            vm = translate.request_for_spec(weight_properties)
            verdicts = make_client().evaluate(vm, [h.host for h in hosts])
        except (translate.Untranslatable, client_mod.ServiceError) as e:
            # Weighing never refuses a host (the filter does): all equal.
            LOG.warning("NumaplaceWeigher: %s; weighing every host equally", e)
            return [0.0 for _ in hosts]
        # The service's score: 10 for the host its own selection takes
        # (by free cores first, then cost), 9 to 1 by cost for the rest, 0
        # for a host that cannot take the VM (only when the filter is off).
        return [float(v["score"]) for v in verdicts]


class _Weighed:
    def __init__(self, obj):
        self.obj = obj


def make_client():
    opts = conf_mod.register()
    return client_mod.Client(opts.url, timeout=opts.timeout)
