// Package webhook is both ends of tokend's webhooks, which follow the
// Standard Webhooks specification (headers webhook-id, webhook-timestamp and
// webhook-signature, HMAC-SHA256 under a whsec_ secret).
//
// A consumer verifies a delivery with [Verify] (or [Receive], which also
// decodes it) and applies its effect once per event with [OnceTx], inside
// its own transaction: tokend delivers at least once, so the same event may
// come twice (a crash between sending and recording the answer, a timeout),
// and the consumer's row in its dedup table is what makes the effect happen
// once. tokend uses [Sign] to sign what it sends.
package webhook
