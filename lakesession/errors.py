"""The root of every exception the client half of lakesession raises.

Catch ``LakesessionError`` to handle anything lakesession raises on purpose;
catch a subclass to handle one concern. Every message ends with a hint on how
to fix the problem, and none ever contains a token, refresh token, client
secret or device code.

```
LakesessionError                      lakesession.errors
└── IdentityError                     lakesession.identity: getting the user's token
    ├── LoginRequiredError            no (usable) login: log in again
    ├── TokenRefreshError             the issuer is unreachable / failing (transient; recovers)
    └── DeviceFlowError               the device-code login did not complete
```

Other rooms of the client (catalog, credentials, gateway, spark, notebook) add
their own subclasses of ``LakesessionError`` next to their code.
"""

from __future__ import annotations

__all__ = ["LakesessionError"]


class LakesessionError(Exception):
    """Base class of all errors raised by the lakesession client."""
