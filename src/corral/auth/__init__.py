"""Authentication shared by the daemons and the commands (docs/security.md).

- ``users``: who a uid is, and which groups the user database gives it;
- ``peercred``: the uid/gid the kernel reports for the peer of a Unix socket (``local``);
- ``tokens``: JSON Web Tokens (``jwt``), issued by ``corral token``;
- ``munge``: credentials from munged through libmunge (``munge``);
- ``tls``: the cluster CA and the daemons' certificates (``corral certs``).

Nothing here is imported by a command unless it uses that method: the commands start
in tens of milliseconds.
"""

# where a credential travels (HTTP header or gRPC metadata, the same lower-case key)
TOKEN_KEY = "authorization"  # "Bearer <jwt>"
MUNGE_KEY = "x-corral-munge"
TOKEN_ENV = "SLURM_JWT"  # the variable Slurm's commands read
CONTROLLER_CN = "ctld"  # the name in the controller's certificate
