package global

import (
	"context"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// The clusterset option serves KEP-1645's DNS specification (version 1.0.0)
// for the global services, named by their base in the clusterset zone:
// <base>.<ns>.svc.clusterset.local for every ready endpoint, local and
// mirrored, and <hostname>.<clusterid>.<base>.<ns>.svc.clusterset.local per
// endpoint, from the same index as the global view.

// dnsVersion is the label of the schema version's TXT record.
const dnsVersion = "dns-version."

// clustersetSchemaVersion is the version of the MCS DNS specification served.
const clustersetSchemaVersion = "1.0.0"

// serveDNSVersion answers dns-version.<clusterset zone>: TXT with the schema
// version; NODATA for other types.
func (g *Global) serveDNSVersion(ctx context.Context, state request.Request, zi int, zone string) (int, error) {
	if state.QType() != dns.TypeTXT {
		return g.negative(ctx, state, zi, zone, dns.RcodeSuccess)
	}
	return writeOne(ctx, state, dns.TXT{Hdr: dns.RR_Header{Name: state.QName(), Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 28800},
		Txt: []string{clustersetSchemaVersion}})
}
