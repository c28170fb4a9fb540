"""Claims and releases from Nova's versioned notifications.

Nova's scheduler has no hook after it picks a host, and the filter and
weigher see every candidate, not the choice. The first moment the chosen
host is known outside the scheduler is the compute host's
``instance.create.start``, sent before the domain is defined: that is
where the claim is made (``POST /v1/placements`` with the instance's UUID
as the VM name, only on that host), so numaplace's agent on the host can
pin the domain Nova defines to it. ``instance.create.error`` (a failed
boot, also the first half of a reschedule, whose next host sends its own
``create.start``) and ``instance.delete.end`` release it.

Run as ``numaplace-nova-claims --config-file /etc/nova/nova.conf`` (Nova's
``[oslo_messaging_notifications] driver = messagingv2`` and
``[notifications] notification_format = versioned`` must be set).
"""

import logging
import re

from numaplace_nova import client as client_mod
from numaplace_nova import conf as conf_mod
from numaplace_nova import translate

LOG = logging.getLogger(__name__)

EVENTS = r"instance\.(create\.(start|error)|delete\.end)"

# A call whose answer was lost (no status: the connection dropped) or that
# the service answered 503 may have been made: it is sent again under the
# same Idempotency-Key, which the service answers with the first answer
# and never a second change; after these tries the outcome is unknown.
TRIES = 3


def _unsure(e):
    return e.status is None or e.status == 503


def _data(obj):
    """A versioned object's fields (``nova_object.data``), or the dict."""
    if isinstance(obj, dict) and "nova_object.data" in obj:
        return obj["nova_object.data"]
    return obj or {}


class ClaimEndpoint:
    """An oslo.messaging notification endpoint: claim on create.start,
    release on create.error and delete.end."""

    def __init__(self, client=None):
        if client is None:
            opts = conf_mod.register()
            token = None
            if opts.token_file:
                with open(opts.token_file) as f:
                    token = f.read().strip()
            client = client_mod.Client(opts.url, timeout=opts.timeout, token=token)
        self.client = client
        try:
            import oslo_messaging
            self.filter_rule = oslo_messaging.NotificationFilter(event_type=EVENTS)
        except ImportError:
            self.filter_rule = None

    def handle(self, event_type, payload):
        """Acts on one notification; returns what it did, for logs and tests."""
        if not re.fullmatch(EVENTS, event_type or ""):
            return "ignored"
        data = _data(payload)
        uuid = data.get("uuid")
        if not uuid:
            return "ignored"
        if event_type == "instance.create.start":
            host = data.get("host")
            flavor = _data(data.get("flavor"))
            try:
                vm = translate.request_from(uuid, flavor["vcpus"], flavor["memory_mb"], flavor.get("extra_specs"))
            except (KeyError, translate.Untranslatable) as e:
                LOG.warning("numaplace: no claim for instance %s on %s: %s", uuid, host, e)
                return "unclaimed"
            def claim(key):
                self.client.claim(vm, host, key=key)
                return "claimed"
            return self._with_retries("claim", uuid, host, claim)
        return self._with_retries(
            "release", uuid, data.get("host"),
            lambda key: "released" if self.client.release(uuid, key=key) else "nothing")

    def _with_retries(self, what, uuid, host, call):
        # One key per instance and act: the start and the error of one
        # build are different acts, and a reschedule's second start is on
        # another host (another key).
        key = "nova-%s-%s-%s" % (what, uuid, host)
        for attempt in range(TRIES):
            try:
                return call(key)
            except client_mod.ServiceError as e:
                if e.code == "already-placed":
                    return "claimed"
                if not _unsure(e):
                    LOG.error("numaplace: %s for instance %s on %s refused: %s", what, uuid, host, e)
                    return {"claim": "unclaimed", "release": "unreleased"}[what]
                last = e
        # Never "failed": it may have been made. Read before acting on it.
        LOG.error("numaplace: %s for instance %s on %s: outcome unknown after %d tries (%s); "
                  "read GET /v1/placements/%s", what, uuid, host, TRIES, last, uuid)
        return "unknown"

    # oslo.messaging calls these by the notification's priority.
    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.handle(event_type, payload)

    def error(self, ctxt, publisher_id, event_type, payload, metadata):
        self.handle(event_type, payload)


def main(argv=None):
    """Listens on Nova's versioned notifications topic."""
    import sys

    import oslo_messaging
    from oslo_config import cfg

    conf = cfg.CONF
    conf(sys.argv[1:] if argv is None else argv, project="nova")
    conf_mod.register(conf)
    transport = oslo_messaging.get_notification_transport(conf)
    targets = [oslo_messaging.Target(topic="versioned_notifications")]
    listener = oslo_messaging.get_notification_listener(
        transport, targets, [ClaimEndpoint()], executor="threading", pool="numaplace")
    listener.start()
    listener.wait()
