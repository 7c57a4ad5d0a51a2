// Command journey is the journey of a user of the mesh, from Go over gRPC: list the user's
// warehouses, register one, submit a workflow, watch it to its end, read a result as a page of
// JSON rows, and print the details of a refused request.
//
// Input: the JSON that `texera-lake dev user NAME` prints (the gateway's address, the user's
// token, a bucket's storage profile and keys), from the file -user names or from stdin, so that
// no secret is on a command line. -unit names a computing unit of the user's (or shared with
// the user) to run on; without it the workflow runs on the user's default unit. Output on
// stdout: one JSON object per step.
//
// The gateway is reached over TLS (1.2 or later), its certificate verified with the CA of
// -ca-file, else of TEXERA_LAKE_CA_FILE, else the embedded stack's (tls.ca of stack.json in
// TEXERA_LAKE_STACK_STATE_DIR, .stack by default), else the system's roots. Plaintext only with
// -plaintext, for a stack started without TLS (texera-lake-stack up --plaintext), for debugging.
//
//	texera-lake dev user carol | build/go/journey [-unit ID] [-ca-file CA | -plaintext]
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	lakev1 "example.com/texera-lake-client/gen/texera/lake/v1"
)

// devUser is what `texera-lake dev user` prints; storage and credentials are protobuf JSON.
type devUser struct {
	Token       string          `json:"token"`
	Gateway     string          `json:"gateway"`
	Storage     json.RawMessage `json:"storage"`
	Credentials json.RawMessage `json:"credentials"`
}

func report(step string, facts map[string]interface{}) {
	facts["step"] = step
	line, err := json.Marshal(facts)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}

func readUser(path string) (*devUser, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	user := &devUser{}
	return user, json.Unmarshal(data, user)
}

// stackCA is the CA of the embedded stack whose state folder is TEXERA_LAKE_STACK_STATE_DIR
// (.stack by default): "" when no stack.json is there, an error when the stack serves plaintext.
func stackCA() (string, error) {
	folder := os.Getenv("TEXERA_LAKE_STACK_STATE_DIR")
	if folder == "" {
		folder = ".stack"
	}
	data, err := os.ReadFile(filepath.Join(folder, "stack.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	var endpoints struct {
		TLS struct {
			Enabled bool   `json:"enabled"`
			CA      string `json:"ca"`
		} `json:"tls"`
	}
	if err := json.Unmarshal(data, &endpoints); err != nil {
		return "", fmt.Errorf("reading %s/stack.json: %w", folder, err)
	}
	if !endpoints.TLS.Enabled {
		return "", fmt.Errorf("the stack in %s serves plaintext: pass -plaintext (for debugging only)", folder)
	}
	return endpoints.TLS.CA, nil
}

// transport is how the client reaches the gateway: TLS verified with the CA of caFile, else of
// TEXERA_LAKE_CA_FILE, else the embedded stack's, else the system's roots; plaintext only when
// asked for.
func transport(plaintext bool, caFile string) (grpc.DialOption, error) {
	if plaintext {
		// (grpc.WithInsecure: the option every grpc-go release has, Debian's 1.33 included.)
		return grpc.WithInsecure(), nil
	}
	if caFile == "" {
		caFile = os.Getenv("TEXERA_LAKE_CA_FILE")
	}
	if caFile == "" {
		found, err := stackCA()
		if err != nil {
			return nil, err
		}
		caFile = found
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12} // RootCAs nil: the system's roots
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading the CA: %w", err)
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(config)), nil
}

// workflow: a range of numbers with their squares, and a small inline table.
func workflow() (*lakev1.Workflow, error) {
	rows := [][]interface{}{{"tea", 2.5}, {"cake", nil}, {"bread", 4}}
	inline := &lakev1.InlineSource{Columns: []*lakev1.ColumnSpec{
		{Name: "item", DataType: "string"},
		{Name: "price", DataType: "double"},
	}}
	for _, row := range rows {
		values, err := structpb.NewList(row) // every Value with its kind set
		if err != nil {
			return nil, err
		}
		inline.Rows = append(inline.Rows, values)
	}
	return &lakev1.Workflow{
		WorkflowId: "go-journey",
		Operators: []*lakev1.Operator{
			{OperatorId: "n", Kind: &lakev1.Operator_RangeSource{RangeSource: &lakev1.RangeSource{End: 1000}}},
			{
				OperatorId:       "sq",
				InputOperatorIds: []string{"n"},
				Materialize:      true,
				Kind: &lakev1.Operator_Projection{Projection: &lakev1.Projection{Columns: []*lakev1.ProjectedColumn{
					{Expression: "id"}, {Expression: "id * id", Alias: "sq"},
				}}},
			},
			{OperatorId: "prices", Materialize: true, Kind: &lakev1.Operator_InlineSource{InlineSource: inline}},
		},
	}, nil
}

// describe turns a refused call's status into the facts a client branches on: the code and
// each detail of grpc-status-details-bin (ErrorInfo's reason above all).
func describe(err error) map[string]interface{} {
	refused := status.Convert(err)
	facts := map[string]interface{}{"code": refused.Code().String(), "message": refused.Message()}
	for _, detail := range refused.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			facts["reason"], facts["domain"] = d.GetReason(), d.GetDomain()
		case *errdetails.ResourceInfo:
			facts["resource_type"], facts["resource_name"] = d.GetResourceType(), d.GetResourceName()
		case *errdetails.BadRequest:
			var fields []string
			for _, violation := range d.GetFieldViolations() {
				fields = append(fields, violation.GetField())
			}
			facts["fields"] = fields
		case error: // a detail whose type is not linked in
			facts["undecoded"] = d.Error()
		}
	}
	return facts
}

func run(userPath, unitID string, security grpc.DialOption) error {
	user, err := readUser(userPath)
	if err != nil {
		return fmt.Errorf("reading the user: %w", err)
	}
	conn, err := grpc.Dial(user.Gateway, security)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+user.Token)
	warehouses := lakev1.NewWarehouseServiceClient(conn)
	executions := lakev1.NewExecutionServiceClient(conn)
	results := lakev1.NewResultServiceClient(conn)

	call, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	listed, err := warehouses.ListWarehouses(call, &lakev1.ListWarehousesRequest{PageSize: 50})
	if err != nil {
		return fmt.Errorf("ListWarehouses: %w", err)
	}
	report("list", map[string]interface{}{"warehouses": len(listed.GetWarehouses())})

	// The storage settings are protobuf JSON: protojson reads them into the request.
	request := &lakev1.CreateWarehouseRequest{}
	body := fmt.Sprintf(`{"warehouse": {"display_name": "from Go", "storage": %s}, "credentials": %s}`,
		user.Storage, user.Credentials)
	if err := protojson.Unmarshal([]byte(body), request); err != nil {
		return fmt.Errorf("reading the storage settings: %w", err)
	}
	call, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	created, err := warehouses.CreateWarehouse(call, request)
	if err != nil {
		return fmt.Errorf("CreateWarehouse: %w", err)
	}
	warehouseID := created.GetWarehouse().GetWarehouseId()
	report("warehouse", map[string]interface{}{"warehouse_id": warehouseID})

	flow, err := workflow()
	if err != nil {
		return err
	}
	call, cancel = context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	submitted, err := executions.SubmitExecution(call, &lakev1.SubmitExecutionRequest{
		WarehouseId: warehouseID, ComputingUnitId: unitID, Workflow: flow,
	})
	if err != nil {
		return fmt.Errorf("SubmitExecution: %w", err)
	}
	executionID := submitted.GetExecution().GetExecutionId()
	report("submitted", map[string]interface{}{"execution_id": executionID})

	call, cancel = context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	watch, err := executions.WatchExecution(call, &lakev1.WatchExecutionRequest{ExecutionId: executionID})
	if err != nil {
		return fmt.Errorf("WatchExecution: %w", err)
	}
	last := submitted.GetExecution()
	for {
		event, err := watch.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("WatchExecution: %w", err)
		}
		last = event.GetExecution()
		report("watch", map[string]interface{}{
			"state":           strings.TrimPrefix(last.GetState().String(), "EXECUTION_STATE_"),
			"tasks_completed": last.GetProgress().GetTasksCompleted(),
			"tasks_total":     last.GetProgress().GetTasksTotal(),
		})
	}
	if last.GetState() != lakev1.ExecutionState_EXECUTION_STATE_SUCCEEDED {
		return fmt.Errorf("execution %s ended %s: %s", executionID, last.GetState(), last.GetError().GetMessage())
	}

	call, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	page, err := results.ReadResultPage(call, &lakev1.ReadResultPageRequest{
		ExecutionId: executionID, OperatorId: "prices", PageSize: 10,
	})
	if err != nil {
		return fmt.Errorf("ReadResultPage: %w", err)
	}
	var rows []interface{}
	for _, row := range page.GetRows() {
		rows = append(rows, row.AsMap()) // google.protobuf.Struct as a Go map
	}
	report("page", map[string]interface{}{"rows": rows})

	// A provoked error: an execution that does not exist. The details say why, for a program.
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	call, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = executions.GetExecution(call, &lakev1.GetExecutionRequest{ExecutionId: "missing-" + hex.EncodeToString(suffix)})
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("GetExecution of a missing execution answered %v", err)
	}
	report("refused", describe(err))
	return nil
}

func main() {
	userPath := flag.String("user", "-", "the JSON `texera-lake dev user` prints (- for stdin)")
	unitID := flag.String("unit", "", "the computing unit to run on (default: the user's default unit)")
	caFile := flag.String("ca-file", "", "the CA that verifies the gateway's certificate "+
		"(default: TEXERA_LAKE_CA_FILE, else the embedded stack's, else the system's roots)")
	plaintext := flag.Bool("plaintext", false, "no TLS, for a stack started without it (debugging only)")
	flag.Parse()
	if *plaintext && *caFile != "" {
		fmt.Fprintln(os.Stderr, "error: -plaintext and -ca-file exclude each other")
		os.Exit(2)
	}
	security, err := transport(*plaintext, *caFile)
	if err == nil {
		err = run(*userPath, *unitID, security)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %s\n", err)
		os.Exit(1)
	}
}
