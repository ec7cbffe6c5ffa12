// Package demo is a small web app that tokend serves under /demo when it is
// turned on (TOKEND_DEMO=1; scripts/run does), to show the form package at
// work: a signed-in user tops up their ledger account through a form that a
// double click, a reload, Back and submit, or a second tab cannot credit
// twice. It is not for a production server: anyone may sign in.
//
// Signing in is "sign in as <name>", with no password: the name is kept in an
// HMAC-signed cookie, and it is the subject every form token is bound to and
// the one account the visitor can top up and see. Each visitor and each
// client address is rate limited (Config.VisitorLimit, Config.IPLimit), since
// every rendering of the form issues a token.
//
// The top-up form is backed by the built-in ledger.credit operation. Its
// amount is typed as text, and the ledger wants an integer, so the submitted
// fields are converted (and checked) before the spend. The token is issued
// with no payload digest: when the page is rendered, the amount is not typed
// yet, so there is nothing to bind it to. What the token binds is the
// rendering (its intent ID), the user and the operation; a resubmit of the
// same rendering, even with other values, shows the first submit's result.
//
// Everything is server-rendered with html/template from embedded templates;
// a small script disables the submit button after a click, but nothing
// depends on it.
package demo
