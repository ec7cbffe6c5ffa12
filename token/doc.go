// Package token defines what a one-time token is, independent of storage: its
// states and allowed transitions, its public id and bearer secret, and the
// payload digest and fingerprint that bind it to one business intent.
//
// Nothing here touches a database; the intent and consume packages persist
// tokens and move them through the state machine defined here.
package token
