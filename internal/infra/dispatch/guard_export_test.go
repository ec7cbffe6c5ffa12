package dispatch

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// PretendOwnAddresses makes addrs this host's interface addresses, as
// net.InterfaceAddrs would answer them, until the returned func restores
// the host's own.
func PretendOwnAddresses(addrs ...string) (restore func()) {
	own.mu.Lock()
	defer own.mu.Unlock()
	read := own.read
	own.read = func() ([]net.Addr, error) {
		var as []net.Addr
		for _, a := range addrs {
			as = append(as, &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(32, 32)})
		}
		return as, nil
	}
	own.addrs, own.at = nil, time.Time{}
	return func() {
		own.mu.Lock()
		defer own.mu.Unlock()
		own.read, own.addrs, own.at = read, nil, time.Time{}
	}
}

// Refused reports whether the dialer refuses a, with no allowed hosts.
func Refused(a netip.Addr) bool {
	return policy{names: map[string]bool{}}.control(context.Background(), "tcp", netip.AddrPortFrom(a, 80).String(), nil) != nil
}
