// Package ledger is the demo business tokend serve ships: per-tenant
// accounts with integer balances, credited and debited by the ledger.credit
// and ledger.debit operations in the spend's own transaction.
//
// It is built like an embedder's business, on the public API only: its
// handlers are typed (consume.RegisterFunc reads each payload into a
// Payload and declares the operation in the same call), and
// its tables come from a migration set of its own (Migrate), applied after
// tokend's. tokend's own packages and migrations know nothing of it.
package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/operation"
)

// Operation names.
const (
	Credit = "ledger.credit"
	Debit  = "ledger.debit"
)

// Limits keep amounts exact through JSON (below 2^53) and balances far from
// int64 overflow.
const (
	MaxAmount  = 1_000_000_000_000
	MaxBalance = 1_000_000_000_000_000
)

// Payload is the business input of both operations.
type Payload struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	TraceID string `json:"trace_id,omitempty"` // ignored by the payload digest
}

// Account is an account's balance, the result of both operations.
type Account struct {
	Account string `json:"account"`
	Balance int64  `json:"balance"`
}

// Failure is the stored result of a declared business failure.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Account string `json:"account"`
	Balance int64  `json:"balance"`
}

// ParsePayload decodes and validates b strictly. Its error is a
// *consume.PayloadError naming the field and the rule broken.
func ParsePayload(b []byte) (Payload, error) {
	if err := consume.CheckPayload(b); err != nil {
		return Payload{}, err
	}
	return parseChecked(b)
}

// UnmarshalJSON is ParsePayload after consume.CheckPayload, which
// consume.Func has already run (or the payload digest's stricter check, on
// a spend or an issue bound to the payload); it makes Payload read itself,
// with the ledger's own rules, when consume.Func decodes a payload into one.
func (p *Payload) UnmarshalJSON(b []byte) error {
	v, err := parseChecked(b)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// parseChecked is ParsePayload on a payload consume.CheckPayload accepted.
// Of several fields at fault, the one whose name sorts first is named.
func parseChecked(b []byte) (Payload, error) {
	// The one reading the payload digest also has (consume.CheckPayload):
	// "Amount" is not "amount", and a member given twice is refused.
	var (
		p                   Payload
		fault               *consume.PayloadError
		hasAccount, hasAmnt bool
	)
	err := eachMember(b, func(name string, raw jsontext.Value) {
		if fault != nil && fault.Field < name {
			return // an earlier name is at fault already
		}
		var pe *consume.PayloadError
		switch name {
		case "account":
			hasAccount = true
			if s, ok := stringValue(raw); ok && ValidAccount(s) {
				p.Account = s
			} else {
				pe = &consume.PayloadError{Field: "account", Rule: ruleAccount}
			}
		case "amount":
			hasAmnt = true
			// An integer in JSON's own notation: no fraction, no exponent.
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n <= 0 || n > MaxAmount {
				pe = &consume.PayloadError{Field: "amount", Rule: ruleAmount}
			}
			p.Amount = n
		case "trace_id":
			if s, ok := stringValue(raw); ok {
				p.TraceID = s
			} else if raw.Kind() != 'n' { // null reads as no trace id
				pe = &consume.PayloadError{Field: "trace_id", Rule: "must be a string"}
			}
		default:
			pe = &consume.PayloadError{Field: name, Rule: "is not a field of this operation (account, amount, trace_id)"}
		}
		if pe != nil {
			fault = pe
		}
	})
	switch {
	case err != nil:
		return Payload{}, err
	case fault != nil:
		return Payload{}, fault
	case !hasAccount:
		return Payload{}, &consume.PayloadError{Field: "account", Rule: "is required; it " + ruleAccount}
	case !hasAmnt:
		return Payload{}, &consume.PayloadError{Field: "amount", Rule: "is required; it " + ruleAmount}
	}
	return p, nil
}

// stringValue is the text of raw when it is a JSON string.
func stringValue(raw jsontext.Value) (string, bool) {
	if raw.Kind() != '"' {
		return "", false
	}
	s, err := jsontext.AppendUnquote(nil, raw)
	return string(s), err == nil
}

var (
	ruleAccount = "must be a string of 1 to 64 of A-Z a-z 0-9 _ . : @ -"
	ruleAmount  = "must be an integer from 1 to " + strconv.FormatInt(MaxAmount, 10)
)

var errNotObject = &consume.PayloadError{Rule: "must be a JSON object {account, amount}"}

// eachMember calls fn with each member of the JSON object b, one
// consume.CheckPayload accepted, its value left raw. It is the ledger's
// one JSON decoding step. The check refused what could be read two ways (a
// member given twice, invalid UTF-8), so the names are exact.
func eachMember(b []byte, fn func(name string, raw jsontext.Value)) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return errNotObject
	}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return errNotObject
		}
		name := tok.String() // before the next read voids tok
		raw, err := dec.ReadValue()
		if err != nil {
			return errNotObject
		}
		fn(name, raw)
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return errNotObject
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return errNotObject
	}
	return nil
}

// Register adds the ledger's operations to r as built-ins: every tenant
// can issue them without declaring them, in atomic mode, with trace_id left
// out of the payload digest. consume.RegisterFunc reads each payload into a
// Payload (ParsePayload's rules) before credit or debit runs, and refuses at
// issue a payload they would refuse.
func Register(r *consume.Registry) {
	ignored := []string{"trace_id"}
	consume.RegisterFunc(r, operation.Policy{Name: Credit, IgnoredFields: ignored}, credit)
	consume.RegisterFunc(r, operation.Policy{Name: Debit, IgnoredFields: ignored}, debit)
}

func credit(ctx context.Context, tx pgx.Tx, c consume.Call, p Payload) (consume.Outcome, error) {
	balance, ok, err := change(ctx, tx, creditSQL, c, p, p.Amount, int64(MaxBalance))
	switch {
	case err != nil:
		return consume.Outcome{}, fmt.Errorf("ledger: credit: %w", err)
	case !ok:
		return consume.Outcome{Status: http.StatusUnprocessableEntity, Result: Failure{
			Code: "balance_limit_exceeded", Message: "the credit would take the balance over its limit",
			Account: p.Account, Balance: balance,
		}}, nil
	}
	return consume.Outcome{Status: http.StatusOK, Result: Account{Account: p.Account, Balance: balance}}, nil
}

func debit(ctx context.Context, tx pgx.Tx, c consume.Call, p Payload) (consume.Outcome, error) {
	balance, ok, err := change(ctx, tx, debitSQL, c, p, -p.Amount)
	switch {
	case err != nil:
		return consume.Outcome{}, fmt.Errorf("ledger: debit: %w", err)
	case !ok:
		return consume.Outcome{Status: http.StatusUnprocessableEntity, Result: Failure{
			Code: "insufficient_funds", Message: "the balance is lower than the amount",
			Account: p.Account, Balance: balance,
		}}, nil
	}
	return consume.Outcome{Status: http.StatusOK, Result: Account{Account: p.Account, Balance: balance}}, nil
}

// change runs a credit's or debit's statement (stmt, with the tenant,
// account, amount and token, then extra) and its entry of entry in one
// round trip. ok is false when the account refused the change; the balance
// is then the one it keeps.
func change(ctx context.Context, tx pgx.Tx, stmt string, c consume.Call, p Payload, entry int64, extra ...any) (balance int64, ok bool, err error) {
	b := &pgx.Batch{}
	b.Queue(stmt, append([]any{c.Tenant, p.Account, p.Amount, c.TokenID}, extra...)...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&balance)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		ok = err == nil
		return err
	})
	b.Queue(entrySQL, c.Tenant, p.Account, c.TokenID, entry)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, false, err
	}
	if !ok {
		balance, err = Balance(ctx, tx, c.Tenant, p.Account)
	}
	return balance, ok, err
}

// Balance returns the balance of tenant's account; an account never credited
// has balance 0.
func Balance(ctx context.Context, q db.DBTX, tenant, account string) (int64, error) {
	var b int64
	err := q.QueryRow(ctx, balanceSQL, tenant, account).Scan(&b)
	if err != nil {
		return 0, fmt.Errorf("ledger: balance: %w", err)
	}
	return b, nil
}

// ValidAccount reports whether s is a well-formed account name: 1 to 64 of
// A-Z a-z 0-9 _ . : @ -.
func ValidAccount(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '_', c == '.', c == ':', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

// creditSQL adds $3 to the balance unless that passes the limit $5, and
// marks the account with the token $4 whose entry entrySQL then writes; no
// row comes back when the limit would be passed, and nothing is changed.
// The update time comes from VALUES through EXCLUDED: Citus refuses now()
// in ON CONFLICT DO UPDATE SET.
//
// The change and its entry are two statements on one tenant, not one
// statement with a CTE feeding the entry's INSERT: Citus runs each of them
// on the worker holding the tenant, so a spend commits there in one phase
// (see migrations/003_last_token.sql).
const creditSQL = `
INSERT INTO ledger_accounts AS la (tenant_id, account, balance, updated_at, last_token_id)
VALUES ($1, $2, $3, now(), $4)
ON CONFLICT (tenant_id, account) DO UPDATE
SET balance = la.balance + EXCLUDED.balance, updated_at = EXCLUDED.updated_at, last_token_id = EXCLUDED.last_token_id
WHERE la.balance + EXCLUDED.balance <= $5
RETURNING balance`

// debitSQL is creditSQL's mirror: no row when funds are insufficient.
const debitSQL = `
UPDATE ledger_accounts SET balance = balance - $3, updated_at = now(), last_token_id = $4
WHERE tenant_id = $1 AND account = $2 AND balance >= $3
RETURNING balance`

// entrySQL writes the entry, of amount $4, of the change creditSQL or
// debitSQL just made for token $3: the account carries that token only if
// the change was made, since a token is spent once.
const entrySQL = `
INSERT INTO ledger_entries (tenant_id, token_id, account, amount)
SELECT tenant_id, last_token_id, account, $4::bigint FROM ledger_accounts
WHERE tenant_id = $1 AND account = $2 AND last_token_id = $3`

const balanceSQL = `SELECT coalesce((SELECT balance FROM ledger_accounts WHERE tenant_id = $1 AND account = $2), 0)`

// Handlers returns a new registry holding the ledger's operations and no
// other, for a program (or a test) whose one business is the ledger.
func Handlers() *consume.Registry {
	r := consume.NewRegistry()
	Register(r)
	return r
}
