package cache

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/token"
)

// An entry's value is its version in decimal, a colon and a body: JSON, or
// nothing for a tombstone. The version comes first so that the script can
// compare it without decoding JSON.
//
// Keys carry a layout version ("v1:") after the prefix: a change to the
// body's layout bumps it, so that during a rolling deploy old and new
// processes never read each other's entries.

func encode(v int64, body []byte) string {
	return strconv.FormatInt(v, 10) + ":" + string(body)
}

// decode splits raw into its version and body. ok is false when raw is not
// an entry; an empty body is a tombstone.
func decode(raw string) (v int64, body string, ok bool) {
	vs, body, found := strings.Cut(raw, ":")
	if !found {
		return 0, "", false
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil || v < 0 {
		return 0, "", false
	}
	return v, body, true
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
// entry there has a version greater than ARGV[1]. An equal version is
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
