"""Websockets per token, counted across every API process (docs/operating/security.md).

``ENVERIF_WS_MAX_SOCKETS_PER_TOKEN`` is a cap for the deployment: counted in each process, N
processes behind a load balancer would let one token hold N times as many sockets. So every
signed-in socket holds a *slot* in Redis: a member of the token's sorted set
(``keys.ws_token_sockets_key``) whose score is the time, on Redis's clock, at which it lapses.

* **Taking** a slot is one script: drop the lapsed members, count the rest, add this socket
  if the count is under the cap. Atomic, so two processes racing for the last slot cannot
  both get it.
* **Live sockets keep their slots**: each process renews all of its sockets' slots every
  ``ENVERIF_WS_SOCKET_SLOT_TTL_S`` / 3 in one pipeline. A process that dies (SIGKILL, OOM,
  a lost host) renews nothing, so its sockets' slots lapse within the TTL and their token may
  open sockets elsewhere; a socket that closes gives its slot back at once.
* **Redis away**: the cap falls back to what this process counts itself (the per-process cap
  of before), rather than refusing every socket: like the sweeper, which sweeps from every
  worker when Redis cannot say whose turn it is, a Redis outage loosens the cap to N times
  for its duration and never locks clients out (docs/operating/outages.md). A renewal after
  the outage adds back the slots Redis lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app import keys

logger = logging.getLogger(__name__)

TAKE_TIMEOUT_S = 2.0

# KEYS[1]: the token's set; ARGV: member, cap, ttl_ms. Redis's clock, so processes on hosts
# whose clocks disagree still agree on what has lapsed.
_TAKE = """
local now = redis.call('TIME')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
# KEYS: token sets; ARGV[1]: ttl_ms, then for each key its member.
_RENEW = """
local now = redis.call('TIME')
local until_ms = now[1] * 1000 + math.floor(now[2] / 1000) + tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, until_ms, ARGV[i + 1])
  redis.call('PEXPIRE', key, ARGV[1])
end
return #KEYS
"""


class SocketSlots:
    """This process's slots in the deployment-wide count (see the module docstring). The
    per-process count of ``ws_auth.SocketCounts`` stays the fallback while Redis is away."""

    def __init__(self, redis: Redis, prefix: str, *, ttl_s: float) -> None:
        self._redis = redis
        self._prefix = prefix
        self.ttl_ms = max(1, round(ttl_s * 1000))
        self._owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count(1)
        self._held: dict[str, int] = {}  # member -> token id
        self._renewer: asyncio.Task[None] | None = None
        self._take = redis.register_script(_TAKE)
        self._renew = redis.register_script(_RENEW)

    def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_forever(), name="enverif-socket-slots")

    async def stop(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        # Give back what is still held (a clean stop): the slots need not wait to lapse.
        for member in list(self._held):
            await self.give_back(member)

    async def take(self, token_id: int, cap: int) -> str | bool | None:
        """A slot for a socket of ``token_id``: its member name; False when the token holds
        ``cap`` sockets in the deployment; None when Redis could not say (the caller keeps
        to its own count)."""
        member = f"{self._owner}:{next(self._ids)}"
        key = keys.ws_token_sockets_key(self._prefix, token_id)
        try:
            # Bounded: a Redis that hangs must not hold a socket's sign-in longer than one
            # that is down.
            async with asyncio.timeout(TAKE_TIMEOUT_S):
                taken = await self._take(keys=[key], args=[member, cap, self.ttl_ms])
        except (RedisError, OSError, TimeoutError) as exc:
            logger.warning("websocket slots: Redis unreachable, counting this process only (%s)", exc)
            return None
        if not taken:
            return False
        self._held[member] = token_id
        return member

    async def give_back(self, member: str) -> None:
        token_id = self._held.pop(member, None)
        if token_id is None:
            return
        with contextlib.suppress(RedisError, OSError):  # lapses by itself otherwise
            await self._redis.zrem(keys.ws_token_sockets_key(self._prefix, token_id), member)

    async def renew(self) -> None:
        held = list(self._held.items())
        if not held:
            return
        await self._renew(
            keys=[keys.ws_token_sockets_key(self._prefix, token_id) for _, token_id in held],
            args=[self.ttl_ms, *(member for member, _ in held)],
        )

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                await self.renew()
            except (RedisError, OSError):
                logger.warning("websocket slots: renewal failed; retrying", exc_info=True)
