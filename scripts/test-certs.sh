#!/usr/bin/env bash
# Certificates for the TLS tests (Rust, Python, Node), made with the
# openssl CLI into DIR, all PEM, EC P-256 keys:
#
#   ca.crt ca.key                 the test CA
#   server.crt server.key         for localhost and 127.0.0.1 (SAN), by the CA
#                                 (serverAuth and clientAuth: a cluster node
#                                 shows it to other nodes as a client too)
#   client.crt client.key         a client certificate, by the CA
#   other-ca.crt other-ca.key     an unrelated CA
#   other-client.crt .key         a client certificate by the unrelated CA
#   wrong-name.crt .key           by the CA, for elsewhere.invalid only
#   expired.crt expired.key       by the CA, for localhost and 127.0.0.1,
#                                 valid in January 2020 only (openssl ca
#                                 -startdate/-enddate: OpenSSL 3.0's x509
#                                 has no -not_after)
#
#   scripts/test-certs.sh DIR
set -euo pipefail
dir=${1:?usage: test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  if ! "$@" >>"$log" 2>&1; then
    cat "$log" >&2
    echo "test-certs.sh: failed: $*" >&2
    exit 1
  fi
}

key() { run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }

cat >ext.cnf <<'EOF'
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
authorityKeyIdentifier = keyid

[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid

[wrong_name]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:elsewhere.invalid
authorityKeyIdentifier = keyid
EOF

# ca NAME SUBJECT: a self-signed CA.
ca() {
  key "$1.key"
  run openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  run openssl x509 -req -in "$1.csr" -signkey "$1.key" -days 3650 -sha256 \
    -extfile ext.cnf -extensions ca -out "$1.crt"
}

# leaf NAME CN SECTION CA: a certificate by CA with the extensions of SECTION.
leaf() {
  key "$1.key"
  run openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  run openssl x509 -req -in "$1.csr" -CA "$4.crt" -CAkey "$4.key" -set_serial "0x$(openssl rand -hex 8)" \
    -days 3650 -sha256 -extfile ext.cnf -extensions "$3" -out "$1.crt"
}

ca ca "redislock test CA"
ca other-ca "unrelated test CA"
leaf server localhost server ca
leaf client "redislock test client" client ca
leaf other-client "unrelated client" client other-ca
leaf wrong-name elsewhere.invalid wrong_name ca

# expired: `openssl ca`, which takes any validity dates.
mkdir -p ca-db
: >ca-db/index.txt
echo 1000 >ca-db/serial
cat >ca.cnf <<EOF
[ca]
default_ca = test_ca

[test_ca]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none

[any]
commonName = supplied

[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
authorityKeyIdentifier = keyid
EOF
key expired.key
run openssl req -new -key expired.key -subj "/CN=localhost" -out expired.csr
run openssl ca -batch -config ca.cnf -cert ca.crt -keyfile ca.key -in expired.csr -out expired.crt \
  -startdate 20200101000000Z -enddate 20200131000000Z -extensions server -notext

rm -f ./*.csr
