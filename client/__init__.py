"""`loreguard.client`: talk to a Loreguard sidecar from Python, sync or asyncio.

```python
from loreguard.client import Client

with Client("tcp://127.0.0.1:7878") as lg:
    result = lg.interact("guard", "Can I pass?")
    print(result.dialogue, result.intents)
```
"""

from loreguard.client.aio import AsyncClient
from loreguard.client.errors import (
    BadRequest,
    Forbidden,
    Internal,
    Invalid,
    LoreguardError,
    NoReply,
    NotFound,
    Overloaded,
    StorageUnavailable,
    Timeout,
    UnknownType,
    UnsupportedVersion,
)
from loreguard.client.sync import Client

__all__ = [
    "AsyncClient",
    "BadRequest",
    "Client",
    "Forbidden",
    "Internal",
    "Invalid",
    "LoreguardError",
    "NoReply",
    "NotFound",
    "Overloaded",
    "StorageUnavailable",
    "Timeout",
    "UnknownType",
    "UnsupportedVersion",
]
