// Package form protects HTML forms from being carried out twice: a double
// click, a reload after the submit, or Back and submit again all show the
// first submit's result page, and the business effect happens once.
//
// Each rendering of a form is one intent. Handler gives every rendering a URL
// of its own (RenderParam), and Issue asks tokend for a token for the form's
// operation and the signed-in user under an intent ID drawn from it: two open
// tabs are two intents, and fetching the same URL again gets the same token.
// The token's secret goes into a hidden field (Field.HTML). On submit, Spend
// spends the token with the submitted fields as payload: the operation's
// handler runs in the same transaction that consumes the token, and its
// outcome is stored. Any later submit of the same rendering gets that stored
// outcome back (Result.Replayed) and renders the same result page. None of
// this needs JavaScript.
//
// A form token is bound to no payload digest: the values are typed after the
// page is rendered, so there is nothing to bind yet. A submit after Back with
// changed values therefore shows the first submit's result, which is the
// rule a form follows: one rendering, one effect. A new effect needs a new
// rendering.
//
// Handler and GinHandler serve a whole form, GET and POST, from a Pages
// implementation; Issue and Spend are for flows of one's own.
//
// Back must show the same rendering, with the same token: a new rendering
// would be a new intent, and its submit a second effect. A rendering's URL
// makes a page fetched again the same rendering, and the browser's copy of
// it is kept when the form is sent to another URL than the page's: after a
// POST, a browser drops its copy of the URL the POST went to (RFC 9111,
// section 4.4). Serve the page at one URL and send the form to another, for
// example GET /topup and <form method="post" action="/topup/send">.
//
// A form token is not CSRF protection. It makes a submit happen at most once;
// it does not prove that the signed-in user meant to submit it. Protect
// forms against cross-site requests with SameSite cookies and an Origin
// check as well.
package form
