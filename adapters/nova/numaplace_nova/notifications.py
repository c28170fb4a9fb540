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
            try:
                self.client.claim(vm, host)
            except client_mod.ServiceError as e:
                if e.code == "already-placed":
                    return "claimed"
                LOG.error("numaplace: claim for instance %s on %s failed: %s", uuid, host, e)
                return "unclaimed"
            return "claimed"
        try:
            return "released" if self.client.release(uuid) else "nothing"
        except client_mod.ServiceError as e:
            LOG.error("numaplace: release of instance %s failed: %s", uuid, e)
            return "unreleased"

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
