package metrics

// IssueOutcome is how a request to issue a token ended.
type IssueOutcome string

// The outcomes of an issue request.
const (
	IssueCreated  IssueOutcome = "created"  // a new token
	IssueReplayed IssueOutcome = "replayed" // the same intent again: the token it got before
	IssueRejected IssueOutcome = "rejected" // refused with an error, no token
)

var issueOutcomes = []string{string(IssueCreated), string(IssueReplayed), string(IssueRejected)}

// SpendOutcome is how a spend ended.
type SpendOutcome string

// The outcomes of a spend.
const (
	// SpendExecuted: the business effect ran and succeeded, or, in lease
	// mode, a lease to run it was granted.
	SpendExecuted SpendOutcome = "executed"
	// SpendReplayed: the token was spent before; its stored outcome was
	// answered again.
	SpendReplayed SpendOutcome = "replayed"
	// SpendFailed: the effect ran and its handler declared a final failure,
	// now stored.
	SpendFailed SpendOutcome = "failed"
	// SpendInProgress: another holder is executing the token.
	SpendInProgress SpendOutcome = "in_progress"
	// SpendRejected: refused with any other error; nothing ran.
	SpendRejected SpendOutcome = "rejected"
)

var spendOutcomes = []string{string(SpendExecuted), string(SpendReplayed), string(SpendFailed),
	string(SpendInProgress), string(SpendRejected)}

// ObserveIssue counts one issue request.
func (m *Metrics) ObserveIssue(o IssueOutcome) {
	if m == nil {
		return
	}
	m.issues.WithLabelValues(oneOf(string(o), issueOutcomes)).Inc()
}

// ObserveSpend counts one spend.
func (m *Metrics) ObserveSpend(o SpendOutcome) {
	if m == nil {
		return
	}
	m.spends.WithLabelValues(oneOf(string(o), spendOutcomes)).Inc()
}
