// Command concurrency runs many executions with bounded concurrency (the
// docs/sdk.md's "Bounded concurrency"): once with the article's channel semaphore, once with the
// SDK's built-in Config.MaxConcurrent.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// Task is one unit of work.
type Task struct{ N int }

// ToRequest is the code that squares N.
func (t Task) ToRequest() sandbox.ExecuteRequest {
	return sandbox.ExecuteRequest{Language: "python", Code: fmt.Sprintf("print(%d * %d)", t.N, t.N)}
}

func main() {
	ctx := context.Background()
	cfg := sandbox.Config{
		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
		APIKey:     os.Getenv("CORRAL_API_KEY"),
		Timeout:    2 * time.Minute,
		MaxRetries: 3,
	}
	var tasks []Task
	for i := 1; i <= 10; i++ {
		tasks = append(tasks, Task{N: i})
	}

	// The article's pattern: a channel as a semaphore.
	client := sandbox.NewClient(cfg)
	var mu sync.Mutex
	sum := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4) // at most 4 at once
	for _, task := range tasks {
		sem <- struct{}{}
		wg.Add(1)
		go func(t Task) {
			defer func() { <-sem }()
			defer wg.Done()
			res, err := client.Execute(ctx, t.ToRequest())
			if err != nil {
				slog.Error("execute", "task", t.N, "err", err)
				return
			}
			var v int
			fmt.Sscan(res.Stdout, &v)
			mu.Lock()
			sum += v
			mu.Unlock()
		}(task)
	}
	wg.Wait()
	fmt.Println("semaphore: sum of squares =", sum)

	// The same bound, built into the client.
	cfg.MaxConcurrent = 4
	bounded := sandbox.NewClient(cfg)
	sum = 0
	for _, task := range tasks {
		wg.Add(1)
		go func(t Task) {
			defer wg.Done()
			res, err := bounded.Execute(ctx, t.ToRequest())
			if err != nil {
				slog.Error("execute", "task", t.N, "err", err)
				return
			}
			var v int
			fmt.Sscan(res.Stdout, &v)
			mu.Lock()
			sum += v
			mu.Unlock()
		}(task)
	}
	wg.Wait()
	fmt.Println("MaxConcurrent: sum of squares =", sum)
}
