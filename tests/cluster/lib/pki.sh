# PKI for the test cluster, generated with openssl. Source, don't execute.
# One CA signs everything (etcd, apiserver, kubelet, clients); the
# service-account signing key is a separate RSA key pair.

# gen_cert NAME CN ORG KIND [SAN...]
#   KIND: server | client | both. SANs: "DNS:x" / "IP:1.2.3.4".
gen_cert() {
	local name=$1 cn=$2 org=$3 kind=$4; shift 4
	local dir=$PKI_DIR
	[[ -s $dir/$name.crt && -s $dir/$name.key ]] && return 0
	local eku subj="/CN=$cn" ext
	[[ -n $org ]] && subj="/O=$org$subj"
	case $kind in
	server) eku=serverAuth ;;
	client) eku=clientAuth ;;
	both) eku=serverAuth,clientAuth ;;
	esac
	ext="$dir/$name.ext"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		if (($#)); then
			local IFS=,
			echo "subjectAltName=$*"
		fi
	} >"$ext"
	openssl genrsa -out "$dir/$name.key" 2048 2>/dev/null
	openssl req -new -key "$dir/$name.key" -subj "$subj" -out "$dir/$name.csr" 2>/dev/null
	openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
		-CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
	rm -f "$dir/$name.csr" "$ext"
}

gen_pki() {
	mkdir -p "$PKI_DIR"
	chmod 700 "$PKI_DIR"
	if [[ ! -s $PKI_DIR/ca.crt ]]; then
		openssl genrsa -out "$PKI_DIR/ca.key" 2048 2>/dev/null
		openssl req -x509 -new -key "$PKI_DIR/ca.key" -subj "/CN=harness-test-cluster-ca" \
			-days 3650 -sha256 -addext "basicConstraints=critical,CA:TRUE" \
			-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
			-out "$PKI_DIR/ca.crt" 2>/dev/null
	fi
	if [[ ! -s $PKI_DIR/sa.key ]]; then
		openssl genrsa -out "$PKI_DIR/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
	fi
	gen_cert etcd-server etcd "" both DNS:localhost IP:127.0.0.1
	gen_cert etcd-client kube-apiserver-etcd-client "" client
	gen_cert apiserver kube-apiserver "" server \
		DNS:localhost DNS:kubernetes DNS:kubernetes.default DNS:kubernetes.default.svc \
		DNS:kubernetes.default.svc.cluster.local IP:127.0.0.1 "IP:$NODE_IP" "IP:$SERVICE_IP"
	gen_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters client
	gen_cert admin harness-admin system:masters client
	gen_cert controller-manager system:kube-controller-manager "" client
	gen_cert scheduler system:kube-scheduler "" client
	gen_cert kubelet-client "system:node:$NODE_NAME" system:nodes client
	gen_cert kubelet-server "$NODE_NAME" "" server "DNS:$NODE_NAME" DNS:localhost IP:127.0.0.1 "IP:$NODE_IP"
}

# write_kubeconfig FILE USER CERTNAME
write_kubeconfig() (
	local file=$1 user=$2 cert=$3
	umask 077
	cat >"$file.tmp" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: harness
  cluster:
    server: https://$APISERVER_HOST:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/$cert.key")
contexts:
- name: harness
  context:
    cluster: harness
    user: $user
current-context: harness
KCFG
	mv "$file.tmp" "$file"
)
