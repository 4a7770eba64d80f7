#!/bin/sh
# The cluster's Secrets, from the directory `corral certs` wrote (docs/kubernetes.md):
#   deploy/kubernetes/secrets.sh TLS_DIR JWT_KEY | kubectl apply -f -
# prints three Secrets of namespace corral, each holding only what its pods need:
#   corral-ctld-tls  ca.crt, ctld.crt, ctld.key (and revoked): ctld's alone
#   corral-jwt       jwt.key, the key that signs users' tokens: ctld's alone
#   corral-node-tls  ca.crt, every node's NODE.crt and NODE.key (and revoked): the nodes'
# ca.key, the CA's private key, goes into none of them: it stays on the host where
# `corral certs` runs, which is where certificates are made. Run it again after
# `corral certs --nodes NEW` or `--revoke NAME`: the pods see the new files (ctld and
# noded re-read `revoked` as it changes; a new node's pair is there for its pod).
set -eu
if [ $# -ne 2 ] || [ ! -d "$1" ] || [ ! -f "$2" ]; then
    echo "usage: $0 TLS_DIR JWT_KEY   (the directory of corral certs, the JWT key file)" >&2
    exit 2
fi
dir=$1
jwt=$2
for need in ca.crt ctld.crt ctld.key; do
    [ -f "$dir/$need" ] || { echo "$0: no $dir/$need (run corral certs first)" >&2; exit 1; }
done
revoked=
[ -f "$dir/revoked" ] && revoked="--from-file=revoked=$dir/revoked"
sep=
secret() {
    printf '%s' "$sep"
    sep="---
"
    kubectl create secret generic "$@" --namespace corral --dry-run=client -o yaml
}
# shellcheck disable=SC2086  # $revoked is one word or none
secret corral-ctld-tls --from-file="ca.crt=$dir/ca.crt" \
    --from-file="ctld.crt=$dir/ctld.crt" --from-file="ctld.key=$dir/ctld.key" $revoked
secret corral-jwt --from-file="jwt.key=$jwt"
# every node's pair: the certificates that are neither the CA's nor ctld's, each with its key
set -- --from-file="ca.crt=$dir/ca.crt"
for crt in "$dir"/*.crt; do
    node=$(basename "$crt" .crt)
    case $node in ca | ctld) continue ;; esac
    [ -f "$dir/$node.key" ] || { echo "$0: $crt has no $node.key" >&2; exit 1; }
    set -- "$@" --from-file="$node.crt=$crt" --from-file="$node.key=$dir/$node.key"
done
# shellcheck disable=SC2086
secret corral-node-tls "$@" $revoked
