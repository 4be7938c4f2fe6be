package loom

import (
	"context"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// GenBudgetSpent is the code of a generator call a meter refused: the
// caller's budget for the base model is spent.
const GenBudgetSpent errs.Code = "generation_budget_spent"

// GenSpend is what one generator call cost.
type GenSpend struct {
	// Completions is how many texts it returned.
	Completions int
	// PromptTokens and CompletionTokens are as the generator reports
	// them, else the loom's estimate.
	PromptTokens, CompletionTokens int64
}

// GenMeter is told of every generator call made on behalf of a context
// (→ continue, and summaries the generator writes): a caller with a
// budget of its own (the collaborator) counts the base model's spend
// against it and refuses a call that would pass it, so no answer can ask
// for more than the budget leaves.
type GenMeter interface {
	// Allow is asked before a call for n texts of at most maxTokens each
	// from a prompt of about promptTokens; an error refuses the call
	// (nothing is generated, the command fails with it).
	Allow(n, maxTokens, promptTokens int) error
	// Spent is told what a call that was made cost, failed or not.
	Spent(GenSpend)
}

type meterKey struct{}

// WithGenMeter returns ctx whose generator calls m counts.
func WithGenMeter(ctx context.Context, m GenMeter) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

func meterOf(ctx context.Context) GenMeter {
	m, _ := ctx.Value(meterKey{}).(GenMeter)
	return m
}
