// Package console is tokend's operator console, served under /console: an
// operator signs in with an operator API key, lists the tenant's tokens by
// state (unknown first: those wait for someone), inspects one with its event
// timeline, and revokes or reconciles it after a confirmation page.
//
// The key is never kept: signing in resolves it once, and the session cookie
// holds only the key's id, its tenant, a CSRF token and an expiry, signed
// with a key derived from the server key. A session outlives the revocation
// of its key by at most Config.SessionTTL.
//
// Every POST of the console is protected against cross-site requests three
// times over: the session cookie is SameSite=Strict, the request must come
// from the console's own origin (Origin, else Referer), and it must carry the
// session's CSRF token. A one-time form token, such as the form package puts
// in the demo's forms, is none of these: it makes a submit happen at most
// once, it does not tell who wanted it. As the source article puts it, a
// token is a one-time business entitlement, not a login credential, and it
// gives no CSRF protection of itself; each security feature needs checks of
// its own.
package console
