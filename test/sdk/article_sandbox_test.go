package sdk

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestArticle reproduces the SDK snippets Corral started from (docs/sdk.md)
// ("Go SDK 接入实战") against a real server. The code inside each step is
// the article's, with only what it leaves out filled in: a real endpoint,
// the code it elides, and a final-state check where the snippet compares with
// "running" (a queued execution is not running either, so the article's
// loop would stop before the result).
func TestArticle(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	t.Setenv("SANDBOX_API_KEY", testserver.AlphaKey)
	ctx := t.Context()

	// §5.2 初始化：连接池和超时配置
	client := sandbox.NewClient(sandbox.Config{
		Endpoint:   srv.URL, // the article: "https://sandbox.internal:8443"
		APIKey:     os.Getenv("SANDBOX_API_KEY"),
		Timeout:    60 * time.Second,
		MaxRetries: 3,
		HTTPClient: &http.Client{
			Transport: &http.Transport{
				MaxIdleConns:        100,
				MaxIdleConnsPerHost: 20,
				IdleConnTimeout:     90 * time.Second,
			},
		},
	})

	t.Run("5.3 sync Execute", func(t *testing.T) {
		result, err := client.Execute(ctx, sandbox.ExecuteRequest{
			Language: "python",
			Code:     "print(sum(range(100)))",
			Limits: sandbox.Limits{
				TimeoutMS: 10000,
				MemoryMB:  256,
			},
		})
		if err != nil {
			t.Fatalf("处理错误: %v", err)
		}
		fmt.Println(result.Stdout) // 4950
		if result.Stdout != "4950\n" {
			t.Errorf("stdout %q, want 4950", result.Stdout)
		}
	})

	t.Run("5.4 async Submit with callback and polling", func(t *testing.T) {
		// A real receiver for the callback, checking the signature.
		type delivery struct {
			res *sandbox.Result
			err error
		}
		got := make(chan delivery, 10)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := sandbox.ReadCallback(r, []byte(testserver.AlphaSecret), 0)
			if err != nil {
				http.Error(w, err.Error(), http.StatusUnauthorized)
			}
			got <- delivery{res, err}
		}))
		defer recv.Close()
		longRunningCode := "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(1)\n"

		execID, err := client.Submit(ctx, sandbox.ExecuteRequest{
			Language: "python",
			Code:     longRunningCode,
			Limits: sandbox.Limits{
				TimeoutMS: 300000, // 5 分钟
				MemoryMB:  2048,
			},
			CallbackURL: recv.URL + "/sandbox/callback", // the article: https://myapp.com/sandbox/callback
		})
		// 立即返回 execution_id，不等结果
		if err != nil || execID == "" {
			t.Fatalf("Submit: %q, %v", execID, err)
		}

		var final *sandbox.Result
		polls := 0
		ticker := time.NewTicker(2 * time.Second)
		defer ticker.Stop()
		for range ticker.C {
			polls++
			if polls > 30 {
				t.Fatalf("no final status after %d polls", polls-1)
			}
			status, err := client.GetExecution(ctx, execID)
			if err != nil {
				// 处理查询错误
				continue
			}
			if status.Status.Final() { // the article: status.Status != "running"
				// 执行结束，处理结果
				final = status
				break
			}
		}
		if final.Status != sandbox.StatusSuccess || final.Stdout != "step 0\nstep 1\nstep 2\n" || polls < 2 {
			t.Errorf("after %d polls: %+v", polls, final)
		}
		select {
		case d := <-got:
			if d.err != nil || d.res.ExecutionID != execID || d.res.Stdout != final.Stdout {
				t.Errorf("callback: %+v, %v", d.res, d.err)
			}
		case <-time.After(30 * time.Second):
			t.Error("no callback")
		}
	})

	t.Run("5.5 error handling", func(t *testing.T) {
		// handle is the article's snippet; it returns what it decided.
		handle := func(result *sandbox.Result, err error) string {
			if err != nil {
				var sbErr *sandbox.Error
				if errors.As(err, &sbErr) {
					switch sbErr.Type {
					case sandbox.ErrTimeout:
						// 提示用户或调大限额
						return "timeout"
					case sandbox.ErrOOM:
						// 调大内存
						return "oom"
					case sandbox.ErrInternal:
						// 重试
						return "internal"
					}
					return "other:" + string(sbErr.Type)
				} else {
					// 传输层错误，可重试
					return "transport"
				}
			}
			return "ok"
		}
		for _, c := range []struct {
			name string
			req  sandbox.ExecuteRequest
			want string
		}{
			{"timeout", sandbox.ExecuteRequest{Language: "python", Code: "while True: pass",
				Limits: sandbox.Limits{TimeoutMS: 1000}}, "timeout"},
			{"oom", sandbox.ExecuteRequest{Language: "python", Code: "x = bytearray(512 << 20)\nprint(len(x))",
				Limits: sandbox.Limits{MemoryMB: 64}}, "oom"},
			{"runtime", sandbox.ExecuteRequest{Language: "python", Code: "raise ValueError('bad')"}, "other:runtime_error"},
			{"compile", sandbox.ExecuteRequest{Language: "python", Code: "print("}, "other:compile_error"},
		} {
			req := c.req
			result, err := client.Execute(ctx, req)
			if got := handle(result, err); got != c.want {
				t.Errorf("%s: handled as %q, want %q (err %v)", c.name, got, c.want, err)
				continue
			}
			// The result comes with the error: the caller still has the output.
			var sbErr *sandbox.Error
			errors.As(err, &sbErr)
			if result == nil || sbErr.Result != result || result.ExecutionID == "" {
				t.Errorf("%s: result %+v not returned with the error", c.name, result)
			}
		}
		// Transport errors take the else branch: nothing listens here.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String()
		l.Close()
		down := sandbox.NewClient(sandbox.Config{Endpoint: dead, APIKey: testserver.AlphaKey, MaxRetries: 1})
		result, err := down.Execute(ctx, sandbox.ExecuteRequest{Language: "python", Code: "print(1)"})
		if got := handle(result, err); got != "transport" {
			t.Errorf("unreachable server handled as %q (err %v)", got, err)
		}
		var te *sandbox.TransportError
		if !errors.As(err, &te) {
			t.Errorf("unreachable server: %T %v", err, err)
		}
	})

	t.Run("5.6 bounded concurrency", func(t *testing.T) {
		type Task struct{ N int }
		toRequest := func(t Task) sandbox.ExecuteRequest {
			return sandbox.ExecuteRequest{Language: "python", Code: fmt.Sprintf("print(%d * %d)", t.N, t.N)}
		}
		var tasks []Task
		for i := 0; i < 12; i++ {
			tasks = append(tasks, Task{N: i})
		}
		var mu sync.Mutex
		var wg sync.WaitGroup // the article's snippet does not wait; a test must
		outs := map[int]string{}
		running, peak := 0, 0

		sem := make(chan struct{}, 4) // 最多 4 并发 (the article: 50)
		for _, task := range tasks {
			sem <- struct{}{}
			wg.Add(1)
			go func(t Task) {
				defer func() { <-sem }()
				defer wg.Done()
				mu.Lock()
				running++
				peak = max(peak, running)
				mu.Unlock()
				res, err := client.Execute(ctx, toRequest(t))
				mu.Lock()
				running--
				if err == nil {
					outs[t.N] = res.Stdout
				}
				mu.Unlock()
			}(task)
		}
		wg.Wait()
		for _, task := range tasks {
			if want := fmt.Sprintf("%d\n", task.N*task.N); outs[task.N] != want {
				t.Errorf("task %d: %q, want %q", task.N, outs[task.N], want)
			}
		}
		if peak > 4 {
			t.Errorf("%d executions at once through a semaphore of 4", peak)
		}

		// The same bound, built in: Config.MaxConcurrent.
		bounded := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, MaxConcurrent: 3})
		var errs []error
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := bounded.Execute(ctx, sandbox.ExecuteRequest{Language: "bash", Code: "echo ok"})
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Errorf("MaxConcurrent client: %v", err)
		}
	})
}
