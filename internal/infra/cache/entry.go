package cache

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/token"
)

// An entry's value is its version in decimal, a colon, a MAC, a colon and
// a body: JSON, or nothing for a tombstone. The version comes first so
// that the script can compare it without decoding JSON.
//
// The MAC is HMAC-SHA256, under Config.MACKey, of the entry's Redis key,
// version and body, in base64url. Whoever can write to Redis but does not
// hold the server key cannot make an entry that passes, nor move one to
// another key (another token's, another tenant's, another API key's): an
// entry that fails is forged, a miss that is counted and logged, never an
// answer.
//
// Keys carry a layout version ("v2:") after the prefix: a change to the
// value's layout bumps it, so that during a rolling deploy old and new
// processes never read each other's entries.

// layout starts every key after the prefix; see above.
const layout = "v2:"

// macLabel derives the cache's MAC key from the server key (MACKey).
const macLabel = "tokend cache entry MAC v1"

// MACKey derives the key that authenticates Redis entries (Config.MACKey)
// from serverKey, the key token secrets are derived under. It is an HMAC
// of a fixed label, so it reveals nothing about serverKey and authenticates
// nothing but cache entries. Every instance sharing a Redis must be given
// the same one.
func MACKey(serverKey []byte) []byte {
	m := hmac.New(sha256.New, serverKey)
	m.Write([]byte(macLabel))
	return m.Sum(nil)
}

// seal returns the value that stores body (nil for a tombstone) at key with
// version v.
func (c *Cache) seal(key string, v int64, body []byte) string {
	vs := strconv.FormatInt(v, 10)
	return vs + ":" + c.mac(key, vs, body) + ":" + string(body)
}

// unseal splits raw, read at key, into its version and body. ok is false
// unless raw is an entry this cache's MAC key made for key; an empty body
// is a tombstone.
func (c *Cache) unseal(key, raw string) (v int64, body string, ok bool) {
	vs, rest, found := strings.Cut(raw, ":")
	if !found {
		return 0, "", false
	}
	tag, body, found := strings.Cut(rest, ":")
	if !found || !c.authentic(tag, key, vs, []byte(body)) {
		return 0, "", false
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil || v < 0 {
		return 0, "", false
	}
	return v, body, true
}

// authentic reports whether tag is the MAC of key, version and body under
// the MAC key or a previous one.
func (c *Cache) authentic(tag, key, version string, body []byte) bool {
	if hmac.Equal([]byte(tag), []byte(macWith(c.macKey, key, version, body))) {
		return true
	}
	for _, k := range c.oldMACs {
		if hmac.Equal([]byte(tag), []byte(macWith(k, key, version, body))) {
			return true
		}
	}
	return false
}

func (c *Cache) mac(key, version string, body []byte) string {
	return macWith(c.macKey, key, version, body)
}

func macWith(macKey []byte, key, version string, body []byte) string {
	m := hmac.New(sha256.New, macKey)
	// Lengths first, so that no two (key, version, body) share an input.
	var n [8]byte
	for _, part := range [][]byte{[]byte(key), []byte(version), body} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		m.Write(n[:])
		m.Write(part)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// maxVersion refuses every entry. It is the largest integer a Lua number,
// a double, holds exactly, so the script compares it without rounding.
const maxVersion = 1<<53 - 1

// version orders the rows a token goes through: generation*10 plus the
// state's rank, issued 0, pending 1, unknown 2, and 3 for the terminal
// states. Every transition token.Next allows raises it: within a generation
// a token only moves forward through these ranks, and the transitions that
// move it back (a lease granted, a takeover, a reconcile to issued) all
// bump the generation. ok is false for a state that is not a token's.
func version(s token.State, generation int64) (v int64, ok bool) {
	var rank int64
	switch s {
	case token.Issued:
		rank = 0
	case token.Pending:
		rank = 1
	case token.Unknown:
		rank = 2
	case token.Consumed, token.Failed, token.Revoked, token.Expired:
		rank = 3
	default:
		return 0, false
	}
	if generation < 0 || generation > (maxVersion-rank)/10 {
		return 0, false
	}
	return generation*10 + rank, true
}

// setScript writes KEYS[1] = ARGV[2] for ARGV[3] milliseconds unless the
// entry there has a version greater than ARGV[1]. The script cannot check
// MACs; a forged entry with a high version refuses fills only until a
// reader finds it forged and deletes it. An equal version is
// replaced: it is the same row, and a reader that read the committed row
// must be able to replace the tombstone its commit left. A value without a
// readable version, or a key of another type, is replaced too.
var setScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'string' then
	local v = tonumber(string.match(cur, '^(%d+):'))
	if v and v > tonumber(ARGV[1]) then
		return 0
	end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`)

// delScript deletes KEYS[1] if it still holds ARGV[1], the value a reader
// found unusable, or if it is of another type and ARGV[1] is empty. An entry
// written since is a fill's and stays.
var delScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[1])
if cur == ARGV[1] or (type(cur) == 'table' and ARGV[1] == '') then
	return redis.call('DEL', KEYS[1])
end
return 0
`)
