"""A short-lived cache of API tokens in each API process, emptied by revocation at once.

Every HTTP request authenticates; without a cache that is a database round trip (and a
pooled connection) before any work. With it, a token looked up in the last
``token_cache_ttl_s`` seconds (30 by default) is taken from memory. What keeps that safe:

* **Revocation** (``revokeApiToken``, ``enverif token revoke``) publishes the token's id on
  ``keys.token_revocations_channel`` after the commit; every API process subscribes and
  drops the entry when the message arrives, so the next request anywhere looks it up again.
  Pub/sub is at-most-once, so the cache is used only while this process holds a live
  subscription (the process's one subscriber, ``app.events.subscriber``): when the
  connection drops, the cache is emptied and bypassed until it is back (a revocation
  published meanwhile cannot be missed).
* **Expiry** is decided on every request from the cached ``expires_at`` and the clock, so a
  cached token stops working at its expiry exactly, as an uncached one does.
* **A lookup racing a revocation** cannot cache the token it read: ``put`` refuses an entry
  read before the latest revocation message, loss or regain of the subscription — a
  generation counter. (A lookup that read the database while the subscription was down
  could have missed a revocation published then, so even once the subscription is back it
  must not be cached.)
* Only live tokens are cached: a refused token is looked up again on each try.

Websockets are not served from here: they re-check their token by id against the database
(``app.graphql.ws_auth``). ``lastUsedAt`` is still recorded (``auth.sign_in``): a cached
entry remembers when this process last wrote it, so writes stay at most one a minute.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app import keys
from app.events.subscriber import RedisSubscriber
from app.settings import Settings

logger = logging.getLogger(__name__)

MAX_ENTRIES = 10_000


@dataclass(slots=True)
class CachedToken:
    """What authentication needs of an ``ApiToken`` row (the same attribute names)."""

    id: int
    workspace_id: int
    role: str
    revoked_at: datetime | None
    expires_at: datetime | None
    last_used_at: datetime | None
    fetched_at: float


class TokenCache:
    """The handler of ``keys.token_revocations_channel`` on the process's subscriber (none
    when ``token_cache_ttl_s`` is 0: the cache is off)."""

    def __init__(self, settings: Settings, subscriber: RedisSubscriber) -> None:
        self.ttl_s = settings.token_cache_ttl_s
        self._entries: dict[str, CachedToken] = {}
        # Bumped by every revocation message and every loss or regain of the subscription;
        # see ``put``.
        self.generation = 0
        self._subscribed = False
        if self.ttl_s > 0:
            subscriber.add(keys.token_revocations_channel(settings.redis_prefix), self)

    @property
    def usable(self) -> bool:
        return self.ttl_s > 0 and self._subscribed

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token_hash: str) -> CachedToken | None:
        if not self.usable:
            return None
        entry = self._entries.get(token_hash)
        if entry is not None and time.monotonic() - entry.fetched_at >= self.ttl_s:
            del self._entries[token_hash]
            return None
        return entry

    def put(self, token_hash: str, row: CachedToken, *, read_at_generation: int) -> None:
        """Keep a live token read while the generation was ``read_at_generation``."""
        if not self.usable or row.revoked_at is not None or read_at_generation != self.generation:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.pop(next(iter(self._entries)))  # the oldest
        self._entries[token_hash] = row

    def drop(self, token_id: int) -> None:
        self.generation += 1
        for token_hash in [h for h, e in self._entries.items() if e.id == token_id]:
            del self._entries[token_hash]

    def _clear(self) -> None:
        self.generation += 1
        self._entries.clear()

    # -- the subscriber's hooks --------------------------------------------------------------
    def on_lost(self) -> None:
        # Revocations published while we are away would be missed: forget everything.
        self._subscribed = False
        self._clear()

    def on_regained(self) -> None:
        self._subscribed = True
        self._clear()

    def on_message(self, data: bytes) -> None:
        try:
            token_id = int(data)
        except ValueError:
            logger.warning("token cache: ignoring a revocation message that is no token id")
            self._clear()
            return
        self.drop(token_id)


async def publish_revocation(redis: aioredis.Redis, settings: Settings, token_id: int) -> None:
    """Tell every API process to forget ``token_id`` (after the revocation is committed).

    Best effort: if Redis is away, the processes subscribed to it have lost their
    subscription too and bypass their caches; one that missed only this message serves the
    token for at most ``token_cache_ttl_s`` more seconds (logged here).
    """
    try:
        await redis.publish(keys.token_revocations_channel(settings.redis_prefix), str(token_id))
    except (RedisError, OSError):
        logger.warning(
            "could not announce the revocation of token %s; API processes may accept it for up "
            "to %.0f s more",
            token_id,
            settings.token_cache_ttl_s,
            exc_info=True,
        )
