package localkube

import (
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// kubernetesServiceIP is the first address of serviceCIDRs: the `kubernetes`
// Service's ClusterIP, through which pods reach the API server.
var kubernetesServiceIP = net.ParseIP("10.96.0.1")

// writeNodePKI writes, for a cluster that real pods use, the serving
// certificate envtest would otherwise make, but with the names a kubeadm
// API server's certificate has: the `kubernetes` Service's ClusterIP and DNS
// names and the address pods reach, so that the in-cluster configuration of a
// pod verifies it. It also writes the ServiceAccount signing key and returns
// the CA the serving certificate is signed by. envtest uses what it finds in
// the directory.
func writeNodePKI(dir string, addr netip.Addr) (caPEM []byte, err error) {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), kubernetesServiceIP, net.IP(addr.AsSlice())}
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("kubernetes", ips, names)
	if err != nil {
		return nil, err
	}
	// The bundle is the serving certificate followed by its CA.
	serving, rest := pem.Decode(certPEM)
	ca, _ := pem.Decode(rest)
	if serving == nil || ca == nil {
		return nil, errors.New("localkube: serving certificate bundle without its CA")
	}
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		"apiserver.crt": pem.EncodeToMemory(serving),
		"apiserver.key": keyPEM,
		// The API server takes the public key out of the private one.
		"sa-signer.key": saKey,
		"sa-signer.crt": saKey,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return pem.EncodeToMemory(ca), nil
}
