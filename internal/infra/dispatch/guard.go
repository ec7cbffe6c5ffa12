package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/idna"
)

// ErrAddressNotAllowed: a delivery would have connected to an address
// deliveries may not go to. Its text is all a tenant reads back about the
// attempt, so it names nothing about the target.
var ErrAddressNotAllowed = errors.New("refused: address not allowed")

// forbidden are the ranges no delivery connects to unless the server's
// operator allows them: loopback, private, link-local (the cloud metadata
// address among them), CGNAT, multicast, unspecified, documentation,
// benchmarking, reserved, and the IPv6 forms that embed an IPv4 address
// someone else's router would unwrap (NAT64, 6to4, Teredo).
var forbidden = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23",
		"2001:db8::/32", "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// Forbidden reports whether a is an address deliveries never go to unless
// allowed: an IPv4-mapped IPv6 address is judged as the IPv4 one it holds.
func Forbidden(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" {
		return true
	}
	for _, p := range forbidden {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// policy is where deliveries may go. Empty, it is every address that is not
// Forbidden. With entries (TOKEND_WEBHOOK_ALLOWED_HOSTS) it is only the
// listed host names, whatever they resolve to, and the addresses inside the
// listed addresses and CIDRs, forbidden or not: the server's operator chose
// them.
type policy struct {
	names map[string]bool
	nets  []netip.Prefix
}

func newPolicy(allowed []string) (policy, error) {
	p := policy{names: map[string]bool{}}
	for _, h := range allowed {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if pre, err := netip.ParsePrefix(h); err == nil {
			if pre.Addr().Zone() != "" {
				return policy{}, fmt.Errorf("dispatch: allowed host %q: a zone is not allowed", h)
			}
			p.nets = append(p.nets, pre.Masked())
			continue
		}
		if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
			a = a.Unmap()
			if a.Zone() != "" {
				return policy{}, fmt.Errorf("dispatch: allowed host %q: a zone is not allowed", h)
			}
			p.nets = append(p.nets, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		name := hostName(h)
		if name == "" || strings.ContainsAny(name, "/:@ ") {
			return policy{}, fmt.Errorf("dispatch: allowed host %q: want a host name, an IP address or a CIDR", h)
		}
		p.names[name] = true
	}
	return p, nil
}

// CheckAllowedHosts reports whether every entry of allowed is a host name,
// an IP address or a CIDR.
func CheckAllowedHosts(allowed []string) error {
	_, err := newPolicy(allowed)
	return err
}

func (p policy) restricted() bool { return len(p.names) > 0 || len(p.nets) > 0 }

func (p policy) allowsName(host string) bool { return p.names[hostName(host)] }

func (p policy) allowsAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, n := range p.nets {
		if n.Contains(a) {
			return true
		}
	}
	return !p.restricted() && !Forbidden(a) && !ownAddress(a)
}

// own caches this host's interface addresses: a delivery to one of them
// (a public address of the server itself) reaches the server's own
// listeners, as loopback would. read is net.InterfaceAddrs but in tests.
var own = struct {
	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]bool
	read  func() ([]net.Addr, error)
}{read: net.InterfaceAddrs}

// ownEvery is how long a reading of the interfaces' addresses is used.
const ownEvery = time.Minute

// ownAddress reports whether a is an address of one of this host's
// interfaces. Interfaces that cannot be read are taken as none: the
// forbidden ranges still hold.
func ownAddress(a netip.Addr) bool {
	own.mu.Lock()
	defer own.mu.Unlock()
	if own.addrs == nil || time.Since(own.at) > ownEvery {
		own.addrs, own.at = map[netip.Addr]bool{}, time.Now()
		if as, err := own.read(); err == nil {
			for _, x := range as {
				if n, ok := x.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok {
						own.addrs[ip.Unmap()] = true
					}
				}
			}
		}
	}
	return own.addrs[a.Unmap().WithZone("")]
}

// hostName is host as names are compared: lower case, without the trailing
// dot that makes a name absolute ("localhost." is "localhost").
func hostName(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

type nameAllowedKey struct{}

// control is the dialer's last word, called for the address actually
// dialed, after resolution, before the connection is made: on every
// attempt, so a name that resolves elsewhere since registration is judged
// by where it points now.
func (p policy) control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	if ctx.Value(nameAllowedKey{}) != nil {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !p.allowsAddr(ap.Addr()) {
		return ErrAddressNotAllowed
	}
	return nil
}

// checkHost judges, at registration, what the URL's host alone shows: a
// literal address that is not allowed, a name that always means this
// machine, or an address spelled as a number in a form some resolvers read
// as an address (2130706433, 0x7f000001, 0177.0.0.1) and others look up.
//
// A host that is not ASCII is judged as the name it is looked up as (IDNA
// with its UTS #46 mapping, as net/http sends it): full-width
// "１２７．０．０．１" is 127.0.0.1 and "ｌｏｃａｌｈｏｓｔ" localhost.
func (p policy) checkHost(host string) error {
	if p.allowsName(host) {
		return nil
	}
	if !ascii(host) {
		a, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return fmt.Errorf("%w: url: host %q: not a valid internationalized host name", ErrInvalidRequest, host)
		}
		if p.allowsName(a) {
			return nil
		}
		host = a
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || !p.allowsAddr(a) {
			return fmt.Errorf("%w: %w", ErrHostNotAllowed, ErrAddressNotAllowed)
		}
		return nil
	}
	name := hostName(host)
	labels := strings.Split(name, ".")
	if last := labels[len(labels)-1]; numeric(last) {
		return fmt.Errorf("%w: url: host %q: write an IPv4 address as four decimal numbers", ErrInvalidRequest, host)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return fmt.Errorf("%w: %w", ErrHostNotAllowed, ErrAddressNotAllowed)
	}
	if len(p.names) > 0 && len(p.nets) == 0 {
		return fmt.Errorf("%w: the URL's host %s is not on the server's allow-list, TOKEND_WEBHOOK_ALLOWED_HOSTS; its operator can add it", ErrHostNotAllowed, host)
	}
	return nil // a name: judged by what it resolves to, at every attempt
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// numeric reports whether a host's last label is a number as the URL
// standard's IPv4 parser reads one (decimal, 0x hex or 0-led octal); such a
// host is an address to some clients, and never a name on the internet.
func numeric(label string) bool {
	if label == "" {
		return false
	}
	if l := strings.ToLower(label); strings.HasPrefix(l, "0x") {
		_, err := strconv.ParseUint("0"+l[2:], 16, 64)
		return err == nil
	}
	for _, r := range label {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
