"""Gonka network adapter: httpx clients for chain REST, CometBFT RPC and devshard hosts, sharing one retry policy."""
from __future__ import annotations

from typing import Sequence
from urllib.parse import urlsplit

from indexer.sources.gonka.chain import ChainRest
from indexer.sources.gonka.fastclient import FastClient, PermanentTransportError
from indexer.sources.gonka.host import Diagnosis, DevshardHost, HostGroup
from indexer.sources.gonka.http import FailureHook, Fetcher, FetchError, ResponseHook, RetryPolicy
from indexer.sources.gonka.rpc import CometRpc
from indexer.sources.gonka.signing import Operator, operator_from_env
from indexer.sources.gonka.urls import UnsafeUrl, check_host_url, vet_address
from indexer.wire.normalize import NormalizeError, participant_inference_url


class _GroupRecordingChain(ChainRest):
    """Chain REST that remembers each escrow's slot addresses as answered, so operator mode knows which escrows'
    payload requests to sign without asking the chain again."""

    def __init__(self, fetcher: Fetcher) -> None:
        super().__init__(fetcher)
        self.groups: dict[str, frozenset[str]] = {}

    def escrow_from(self, escrow_id: str | int) -> tuple[dict, str]:
        data, node = super().escrow_from(escrow_id)
        slots = (data.get("escrow") or {}).get("slots") if isinstance(data, dict) else None
        if isinstance(slots, list):
            self.groups[str(int(escrow_id))] = frozenset(str(s) for s in slots)
        return data, node


class Gonka:
    """All clients of one poll: chain REST (with failover over ``chain_urls``), RPC, and hosts by address.

    ``operator`` (see :func:`operator_from_env`) signs payload requests of the escrows whose group holds it.
    ``on_diagnosis(source, url, message, transient)`` hears which payload route each host speaks (HTTP, or Connect
    RPC once its HTTP route answers 410 http_session_retired).
    ``private_hosts``: whether a host's ``inference_url`` may resolve to a loopback, private or link-local address
    (:mod:`indexer.sources.gonka.urls`; the chain URLs are the operator's own and are never restricted)."""

    def __init__(self, chain_urls: str | Sequence[str], rpc_urls: str | Sequence[str], *,
                 policy: RetryPolicy | None = None, on_response: ResponseHook | None = None,
                 on_failure: FailureHook | None = None, operator: Operator | None = None,
                 private_hosts: bool = False, on_diagnosis: Diagnosis | None = None) -> None:
        self.policy = policy or RetryPolicy()
        # httpx's interface at a third of its CPU cost
        self.client = FastClient(timeout=self.policy.timeout, deadline=self.policy.deadline)
        self.private_hosts = private_hosts
        kw = dict(policy=self.policy, client=self.client, on_response=on_response, on_failure=on_failure)
        self._kw = kw
        self.operator = operator
        self.on_diagnosis = on_diagnosis  # which payload route each host speaks (DevshardHost._diagnose)
        chain_fetcher = Fetcher(chain_urls, name="chain", **kw)
        self.chain = _GroupRecordingChain(chain_fetcher) if operator is not None else ChainRest(chain_fetcher)
        self.rpc = CometRpc(Fetcher(rpc_urls, name="rpc", **kw))
        # the operator's own nodes: a participant's inference_url naming one of them must not put a guard on it
        self._nodes = {urlsplit(u)[:2] for u in [*chain_fetcher.base_urls, *self.rpc.http.base_urls]}
        self._hosts: dict[str, DevshardHost | FetchError | None] = {}

    def host(self, address: str) -> DevshardHost | None:
        """The devshard host of a participant (``participant/{addr}.inference_url``), cached; None if it has none.
        An ``inference_url`` the poller refuses (:func:`check_host_url`) raises a permanent FetchError naming it,
        each time it is asked for; a host one of whose answers outran the deadline raises a transient one (a Gonka
        lives one cycle)."""
        if address not in self._hosts:
            try:
                url = check_host_url(participant_inference_url(self.chain.participant(address)))
            except NormalizeError:
                self._hosts[address] = None
            except UnsafeUrl as exc:
                self._hosts[address] = FetchError(f"participant:{address}", str(exc), transient=False)
            except FetchError as exc:
                if exc.transient:
                    raise  # try again next time
                self._hosts[address] = None
            else:
                fetcher = Fetcher(url, name=f"host:{address}", **self._kw)
                self._hosts[address] = self._vetted(address, fetcher) or DevshardHost(
                    address, fetcher, operator=self.operator, groups=self._group, on_diagnosis=self.on_diagnosis)
        host = self._hosts[address]
        if isinstance(host, FetchError):
            raise host
        if host is not None and host.http.overran:
            # one deadline per cycle is all a host that trickles its answers, or never answers, may cost: not asked
            # again this cycle
            raise FetchError(host.http.base_urls[0], "skipped for the rest of the cycle: an answer outran its "
                             "deadline, or every attempt of a request timed out", transient=True)
        return host

    def _vetted(self, address: str, fetcher: Fetcher) -> FetchError | None:
        """Without ``private_hosts``, a host's address is vetted when each connection to it opens (the guard of its
        scheme and netloc). A host at one of the operator's own chain or RPC nodes is vetted now instead: a guard
        there would also refuse the chain reads, so a participant could cut the poller off its own node by naming
        it. Returns the host's refusal, or None."""
        if self.private_hosts:
            return None
        parts = urlsplit(fetcher.base_urls[0])
        if (parts.scheme, parts.netloc) not in self._nodes:
            self.client.guards[(parts.scheme, parts.netloc)] = vet_address
            return None
        try:
            vet_address(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        except PermanentTransportError as exc:
            return FetchError(f"participant:{address}", str(exc), transient=False)
        return None

    def _group(self, escrow_id: str) -> frozenset[str] | None:
        return getattr(self.chain, "groups", {}).get(escrow_id)

    def requests(self) -> int:
        n = self.chain.http.requests + self.rpc.http.requests
        return n + sum(h.http.requests for h in self._hosts.values() if isinstance(h, DevshardHost))

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Gonka":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ChainRest", "CometRpc", "DevshardHost", "FetchError", "Fetcher", "Gonka", "HostGroup", "Operator",
           "RetryPolicy", "operator_from_env"]
