"""Bytes each replica sends during training, by configuration."""

from __future__ import annotations

from dataclasses import dataclass

from noloco.infra.record import JsonRecord
from noloco.studies.ensemble.plan import BYTES_PER_VALUE, ENSEMBLES


@dataclass(frozen=True)
class Communication(JsonRecord):
    """What one configuration sends during training: how, how often, and the seconds on the internet network."""

    scheme: str
    events: int
    bytes_per_event: float
    bytes_per_replica: float
    seconds_internet: float


def communication(config: str, n_params: int, replicas: int, steps: int, inner_steps: int,
                  group_size: int = 2) -> Communication:
    """Bytes each replica sends during a run (it receives as many) and the seconds it spends on it on the
    default network of ``noloco comm`` (:data:`noloco.theory.comm.INTERNET`), for a run of ``steps`` inner
    steps; m = n_params x 4 bytes.

    * ddp: a ring all-reduce of the gradients at every step; the bytes a rank sends in a ring
      all-reduce, 2 (N-1)/N m, are the bandwidth term of :func:`noloco.theory.comm.ring_allreduce`
      on a network of 1 second per byte without latency;
    * diloco: the same all-reduce of the progress at every outer step (every ``inner_steps``);
    * noloco: the reference's root exchange at every outer step: each member sends its weights and
      its progress (two vectors) to the group's root, which sends the two means back to each member,
      so a group of n sends 2 x 2 (n-1) vectors, 2 m per replica for a pair (the seconds are
      :func:`noloco.theory.comm.root_group_exchange`'s);
    * ensembles: 0 (an expert exchanges nothing while it trains).
    """
    from noloco.theory.comm import INTERNET, Network, ring_allreduce, root_group_exchange

    m = n_params * BYTES_PER_VALUE
    if config in ENSEMBLES:
        return Communication("none: every expert trains alone", 0, 0, 0, 0.0)
    if config == "noloco":
        events, sent = steps // inner_steps, 2 * 2 * (group_size - 1) / group_size * m
        seconds, scheme = root_group_exchange(INTERNET, m, group_size), "root exchange of (phi, progress) in pairs"
    else:
        events = steps if config == "ddp" else steps // inner_steps
        sent = ring_allreduce(Network(latency=0.0, seconds_per_byte=1.0), m, replicas)
        seconds = ring_allreduce(INTERNET, m, replicas)
        scheme = ("ring all-reduce of the gradients every step" if config == "ddp"
                  else "ring all-reduce of the progress every outer step")
    return Communication(scheme, events, sent, events * sent, events * seconds)
