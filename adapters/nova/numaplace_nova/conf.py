"""The ``[numaplace]`` options in nova.conf."""

from oslo_config import cfg

GROUP = "numaplace"

OPTS = [
    cfg.StrOpt("url", default="http://127.0.0.1:7478",
               help="numaplace serve's URL."),
    cfg.StrOpt("token_file", default=None,
               help="A file holding a credential for claims and releases "
                    "(the notification endpoint); the filter and weigher "
                    "only read."),
    cfg.FloatOpt("timeout", default=2.0, min=0.1,
                 help="Seconds one call to the service may take."),
    cfg.BoolOpt("fail_open", default=False,
                help="When the service cannot be asked: pass every host "
                     "(true) or none (false, the default: no instance is "
                     "placed on CPUs nobody checked)."),
]


def register(conf=None):
    """Registers the options (idempotent) and returns the group."""
    conf = conf or cfg.CONF
    try:
        conf.register_opts(OPTS, group=GROUP)
    except cfg.DuplicateOptError:
        pass
    return conf[GROUP]
