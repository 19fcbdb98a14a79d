//! The server end to end over real loopback HTTP: every endpoint, every
//! error of the message-control document, against a scripted fake
//! upstream (OpenAI Chat Completions) and the real MCP tool server.

mod support;

use reqwest::Method;
use serde_json::{json, Value};
use support::{calls, text, TestServer, ALICE, BOB};

const NOT_OWNER: &str = "Context does not belong to user";

fn error(body: &Value) -> &str {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {body}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn contexts_are_created_read_listed_and_published_by_their_owner() {
    let server = TestServer::start(false).await;
    let (status, created) = server
        .post(
            "/contexts",
            ALICE,
            json!({"agent_id": "assistant", "context_id": "ctx_123", "user_defined": {"title": "trip"}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["context_id"], "ctx_123");
    assert_eq!(created["agent_id"], "assistant");
    assert_eq!(created["user_id"], "alice");
    assert_eq!(created["public"], false);
    assert_eq!(created["messages"], json!([]));
    assert_eq!(created["user_defined"], json!({"title": "trip"}));
    assert!(created["created_at"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(created["updated_at"], created["created_at"]);

    // A made-up id when none is given.
    let (status, other) = server
        .post("/contexts", ALICE, json!({"agent_id": "assistant"}))
        .await;
    assert_eq!(status, 201);
    assert!(other["context_id"].as_str().unwrap().starts_with("ctx_"));

    // Conflicts and bad input.
    let (status, body) = server
        .post(
            "/contexts",
            BOB,
            json!({"agent_id": "assistant", "context_id": "ctx_123"}),
        )
        .await;
    assert_eq!(
        (status, error(&body)),
        (409, "Context with id: ctx_123 already exists")
    );
    let (status, body) = server
        .post("/contexts", ALICE, json!({"agent_id": "nobody"}))
        .await;
    assert_eq!(status, 400);
    assert!(
        error(&body).starts_with("Unknown agent_id \"nobody\""),
        "{body}"
    );
    let (status, body) = server
        .post(
            "/contexts",
            ALICE,
            json!({"agent_id": "assistant", "context_id": "a b"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        error(&body).starts_with("context_id must be 1 to 128"),
        "{body}"
    );

    // Reading: the owner, not bob while it is private.
    let (status, body) = server.get("/contexts/ctx_123", ALICE).await;
    assert_eq!(
        (status, body["context_id"].clone()),
        (200, json!("ctx_123"))
    );
    let (status, body) = server.get("/contexts/ctx_123", BOB).await;
    assert_eq!((status, error(&body)), (403, NOT_OWNER));
    let (status, body) = server.get("/contexts/ctx_404", ALICE).await;
    assert_eq!(
        (status, error(&body)),
        (404, "Context with id: ctx_404 does not exist")
    );

    // Listing: each user's own.
    let (status, list) = server.get("/contexts", ALICE).await;
    assert_eq!(status, 200);
    assert_eq!(list["contexts"].as_array().unwrap().len(), 2);
    let (_, list) = server.get("/contexts", BOB).await;
    assert_eq!(list["contexts"], json!([]));

    // Publishing: only the owner; then bob reads but still cannot write.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/contexts/ctx_123",
            Some(BOB),
            Some(json!({"public": true})),
        )
        .await;
    assert_eq!((status, error(&body)), (403, NOT_OWNER));
    let (status, body) = server
        .call(
            Method::PATCH,
            "/contexts/ctx_123",
            Some(ALICE),
            Some(json!({"public": true})),
        )
        .await;
    assert_eq!((status, body["public"].clone()), (200, json!(true)));
    let (status, _) = server.get("/contexts/ctx_123", BOB).await;
    assert_eq!(status, 200);
    for (path, body) in [
        (
            "/context/add-messages",
            json!({"context_id": "ctx_123", "messages": [{"sender": "human", "message": "hi"}]}),
        ),
        (
            "/context/set-messages",
            json!({"context_id": "ctx_123", "messages": []}),
        ),
        ("/chat", json!({"context_id": "ctx_123", "message": "hi"})),
        ("/chat/invoke", json!({"context_id": "ctx_123"})),
        (
            "/chat/add-ai-message",
            json!({"context_id": "ctx_123", "message": "hi"}),
        ),
    ] {
        let (status, answer) = server.post(path, BOB, body).await;
        assert_eq!((status, error(&answer)), (403, NOT_OWNER), "{path}");
    }
    assert_eq!(server.messages("ctx_123").await, json!([]));
    assert!(server.upstream.requests().is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_endpoint_wants_a_valid_bearer_token() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    for (method, path) in [
        (Method::POST, "/chat"),
        (Method::POST, "/chat/add-ai-message"),
        (Method::POST, "/chat/invoke"),
        (Method::POST, "/context/add-messages"),
        (Method::POST, "/context/set-messages"),
        (Method::POST, "/contexts"),
        (Method::GET, "/contexts"),
        (Method::GET, "/contexts/ctx_1"),
        (Method::PATCH, "/contexts/ctx_1"),
    ] {
        let (status, body) = server
            .call(
                method.clone(),
                path,
                None,
                Some(json!({"context_id": "ctx_1"})),
            )
            .await;
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(error(&body).starts_with("Missing bearer token"));
        let (status, body) = server
            .call(
                method.clone(),
                path,
                Some("wrong"),
                Some(json!({"context_id": "ctx_1"})),
            )
            .await;
        assert_eq!(
            (status, error(&body)),
            (401, "Invalid bearer token"),
            "{method} {path}"
        );
    }
    let response = server
        .http
        .get(format!("{}/contexts", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_saves_the_turn_or_previews_it_for_approval() {
    let mcp = support::mcp_available();
    let server = TestServer::start(mcp).await;
    server.create("ctx_123").await;
    let (tool, input, output) = if mcp {
        ("add", r#"{"a":2,"b":3}"#, "5")
    } else {
        ("client_side", r#"{"q":"x"}"#, "")
    };
    if mcp {
        server
            .upstream
            .push([calls(&[("call_1", tool, input)]), text("The sum is 5.")]);
        let (status, body) = server
            .post(
                "/chat",
                ALICE,
                json!({"context_id": "ctx_123", "message": "2+3?"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["response"], "The sum is 5.");
        assert_eq!(body["saved_ai_messages"], true);
        // The tool's status changes, as recorded.
        let events = body["events"].as_array().unwrap();
        let statuses: Vec<&Value> = events.iter().map(|event| &event["status"]).collect();
        assert_eq!(statuses, [&json!("running"), &json!("completed")]);
        let generated = json!([
            {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "add", "tool_input": {"a": 2, "b": 3}},
            {"type": "tool_response", "tool_call_id": "call_1", "tool_output": output},
            {"sender": "ai", "message": "The sum is 5."},
        ]);
        assert_eq!(body["generated_messages"], generated);
        let mut expected = vec![json!({"sender": "human", "message": "2+3?"})];
        expected.extend(generated.as_array().unwrap().iter().cloned());
        assert_eq!(server.messages("ctx_123").await, json!(expected));
        // The model was shown the tool's output.
        let requests = server.upstream.requests();
        assert_eq!(requests.len(), 2);
        assert!(requests[1]["messages"].to_string().contains("call_1"));
        assert!(requests[0]["tools"].to_string().contains("\"add\""));
    }

    // Preview: the human message is saved, the answer only returned.
    let before = server.messages("ctx_123").await.as_array().unwrap().len();
    server.upstream.push([text("Preview answer.")]);
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_123", "message": "Weather?", "save_ai_messages": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["saved_ai_messages"], false);
    assert_eq!(
        body["generated_messages"],
        json!([{"sender": "ai", "message": "Preview answer."}])
    );
    let stored = server.messages("ctx_123").await;
    assert_eq!(stored.as_array().unwrap().len(), before + 1);
    assert_eq!(
        stored[before],
        json!({"sender": "human", "message": "Weather?"})
    );

    // Approve: add the generated messages.
    let (status, context) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_123", "messages": body["generated_messages"]}),
        )
        .await;
    assert_eq!(status, 200, "{context}");
    assert_eq!(context["messages"].as_array().unwrap().len(), before + 2);
    assert_eq!(
        context["messages"][before + 1],
        json!({"sender": "ai", "message": "Preview answer."})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_the_server_cannot_run_comes_back_pending_and_the_client_completes_it() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    server
        .upstream
        .push([calls(&[("call_9", "client_side", r#"{"q":"x"}"#)])]);
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_1", "message": "Look it up", "save_ai_messages": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["generated_messages"],
        json!([{"type": "tool_call", "tool_call_id": "call_9", "tool_name": "client_side", "tool_input": {"q": "x"}}])
    );
    // The client runs it, records call and response, and invokes.
    let call = body["generated_messages"][0].clone();
    let (status, _) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_1", "messages": [call, {"type": "tool_response", "tool_call_id": "call_9", "tool_output": "found it"}]}),
        )
        .await;
    assert_eq!(status, 200);
    server.upstream.push([text("It says: found it.")]);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"], "It says: found it.");
    let last = server.upstream.requests().pop().unwrap();
    assert!(last["messages"].to_string().contains("found it"), "{last}");
    let stored = server.messages("ctx_1").await;
    assert_eq!(stored.as_array().unwrap().len(), 4, "{stored}");
    assert_eq!(
        stored[3],
        json!({"sender": "ai", "message": "It says: found it."})
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn add_ai_message_saves_per_its_four_cases() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    let path = "/chat/add-ai-message";

    // A pre-written message: always saved, nothing generated.
    let (status, body) = server
        .post(
            path,
            ALICE,
            json!({"context_id": "ctx_1", "message": "Done.", "save_ai_messages": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"response": "Done.", "saved_ai_messages": true, "generated_messages": [], "events": []})
    );
    let mut expected = vec![json!({"sender": "ai", "message": "Done."})];
    assert_eq!(server.messages("ctx_1").await, json!(expected));

    let cases = [
        // (save_system_message, save_ai_messages)
        (true, true),
        (true, false),
        (false, true),
        (false, false),
    ];
    for (case, (save_system, save_ai)) in cases.into_iter().enumerate() {
        let prompt = format!("prompt {}", case + 1);
        let answer = format!("answer {}", case + 1);
        server.upstream.push([text(&answer)]);
        let (status, body) = server
            .post(
                path,
                ALICE,
                json!({"context_id": "ctx_1", "prompt": prompt, "save_system_message": save_system, "save_ai_messages": save_ai}),
            )
            .await;
        assert_eq!(status, 200, "case {}: {body}", case + 1);
        assert_eq!(body["response"], answer.as_str());
        assert_eq!(body["saved_ai_messages"], save_ai);
        assert_eq!(
            body["generated_messages"],
            json!([{"sender": "ai", "message": answer}])
        );
        // The model saw the prompt either way.
        let request = server.upstream.requests().pop().unwrap();
        assert!(
            request["messages"].to_string().contains(&prompt),
            "case {}",
            case + 1
        );
        if save_system {
            expected.push(json!({"sender": "system", "message": prompt}));
        }
        if save_ai {
            expected.push(json!({"sender": "ai", "message": answer}));
        }
        assert_eq!(
            server.messages("ctx_1").await,
            json!(expected),
            "case {}",
            case + 1
        );
    }

    // The defaults are case 1.
    server.upstream.push([text("default")]);
    let (status, _) = server
        .post(path, ALICE, json!({"context_id": "ctx_1", "prompt": "p"}))
        .await;
    assert_eq!(status, 200);
    expected.push(json!({"sender": "system", "message": "p"}));
    expected.push(json!({"sender": "ai", "message": "default"}));
    assert_eq!(server.messages("ctx_1").await, json!(expected));

    // message xor prompt.
    let (status, body) = server
        .post(
            path,
            ALICE,
            json!({"context_id": "ctx_1", "message": "a", "prompt": "b"}),
        )
        .await;
    assert_eq!(
        (status, error(&body)),
        (400, "Provide either message or prompt, not both")
    );
    let (status, body) = server
        .post(path, ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(
        (status, error(&body)),
        (400, "Provide either message or prompt")
    );
    assert_eq!(server.messages("ctx_1").await, json!(expected));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invoke_answers_the_stored_conversation_and_previews() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    let manual = json!([
        {"sender": "human", "message": "Search for user data"},
        {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "database_search", "tool_input": {"table": "users"}},
        {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "Found 100 active users"},
    ]);
    let (status, context) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_1", "messages": manual}),
        )
        .await;
    assert_eq!(status, 200, "{context}");
    assert_eq!(context["messages"], manual);

    server.upstream.push([text("100 users are active.")]);
    let (status, body) = server
        .post(
            "/chat/invoke",
            ALICE,
            json!({"context_id": "ctx_1", "save_ai_messages": false}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["saved_ai_messages"], false);
    assert_eq!(server.messages("ctx_1").await, manual);
    assert!(server.upstream.requests()[0]["messages"]
        .to_string()
        .contains("Found 100 active users"));

    server.upstream.push([text("100 users are active.")]);
    let (status, body) = server
        .post("/chat/invoke", ALICE, json!({"context_id": "ctx_1"}))
        .await;
    assert_eq!(
        (status, body["saved_ai_messages"].clone()),
        (200, json!(true))
    );
    assert_eq!(server.messages("ctx_1").await.as_array().unwrap().len(), 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn set_messages_replaces_and_validation_errors_change_nothing() {
    let server = TestServer::start(false).await;
    server.create("ctx_123").await;
    let fresh = json!([
        {"sender": "system", "message": "This is a fresh conversation"},
        {"sender": "human", "message": "Hello, starting over"},
    ]);
    let (status, context) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_123", "messages": [{"sender": "human", "message": "old"}]}),
        )
        .await;
    assert_eq!(status, 200, "{context}");
    let (status, context) = server
        .post(
            "/context/set-messages",
            ALICE,
            json!({"context_id": "ctx_123", "messages": fresh}),
        )
        .await;
    assert_eq!(status, 200, "{context}");
    assert_eq!(context["messages"], fresh);
    for key in [
        "context_id",
        "agent_id",
        "user_id",
        "messages",
        "user_defined",
        "created_at",
        "updated_at",
    ] {
        assert!(context.get(key).is_some(), "{key} missing from {context}");
    }

    let bad = [
        (
            json!([{"type": "tool_response", "tool_call_id": "call_123", "tool_output": "x"}]),
            "Tool responses found without corresponding tool calls: ['call_123']",
        ),
        (
            json!([
                {"type": "tool_response", "tool_call_id": "call_1", "tool_output": "x"},
                {"type": "tool_call", "tool_call_id": "call_1", "tool_name": "t", "tool_input": {}},
            ]),
            "Tool response with ID 'call_1' appears before its corresponding tool call",
        ),
        (
            json!([{"type": "tool_call", "tool_call_id": "call_2", "tool_name": "t", "tool_input": {}}]),
            "Tool calls found without corresponding responses: ['call_2']",
        ),
    ];
    for path in ["/context/add-messages", "/context/set-messages"] {
        for (messages, text) in &bad {
            let (status, body) = server
                .post(
                    path,
                    ALICE,
                    json!({"context_id": "ctx_123", "messages": messages}),
                )
                .await;
            assert_eq!((status, error(&body)), (400, *text), "{path}");
        }
        let (status, body) = server
            .post(
                path,
                ALICE,
                json!({"context_id": "ctx_404", "messages": []}),
            )
            .await;
        assert_eq!(
            (status, error(&body)),
            (404, "Context with id: ctx_404 does not exist")
        );
    }
    assert_eq!(server.messages("ctx_123").await, fresh);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_oversized_requests_are_refused_with_their_codes() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    let raw = |body: &'static str| {
        server
            .http
            .post(format!("{}/context/add-messages", server.url))
            .bearer_auth(ALICE)
            .header("content-type", "application/json")
            .body(body)
    };
    for (body, want) in [
        ("{not json", "Invalid JSON body"),
        (r#"{"messages": []}"#, "missing field `context_id`"),
        (
            r#"{"context_id": "ctx_1", "messages": [{"sender": "robot", "message": "x"}]}"#,
            "messages[0]",
        ),
        (
            r#"{"context_id": "ctx_1", "messages": [], "extra": 1}"#,
            "unknown field `extra`",
        ),
    ] {
        let response = raw(body).send().await.unwrap();
        assert_eq!(response.status(), 422, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert!(error(&answer).contains(want), "{body}: {answer}");
    }
    // Over the body limit.
    let big = "x".repeat(convlog_server::REQUEST_BODY_BYTES_MAX + 1);
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_1", "messages": [{"sender": "human", "message": big}]}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].is_string());
    // Over the message count limit.
    let many: Vec<Value> = (0..=convlog_server::MESSAGES_PER_REQUEST_MAX)
        .map(|_| json!({"sender": "human", "message": "x"}))
        .collect();
    let (status, body) = server
        .post(
            "/context/add-messages",
            ALICE,
            json!({"context_id": "ctx_1", "messages": many}),
        )
        .await;
    assert_eq!(status, 413);
    assert!(
        error(&body).starts_with("Too many messages: 1001"),
        "{body}"
    );
    assert_eq!(server.messages("ctx_1").await, json!([]));
    // Unknown routes and methods answer in the same shape.
    let (status, body) = server.get("/nowhere", ALICE).await;
    assert_eq!((status, error(&body)), (404, "No endpoint GET /nowhere"));
    let (status, body) = server.get("/chat", ALICE).await;
    assert_eq!(status, 405);
    assert!(body["error"].is_string());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_failure_is_a_502_and_keeps_the_human_message() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    // No scripted reply: the fake upstream answers 400.
    let (status, body) = server
        .post(
            "/chat",
            ALICE,
            json!({"context_id": "ctx_1", "message": "hello"}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(error(&body).contains("no scripted reply left"), "{body}");
    assert_eq!(
        server.messages("ctx_1").await,
        json!([{"sender": "human", "message": "hello"}])
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_openapi_and_request_ids() {
    let server = TestServer::start(false).await;
    let response = server
        .http
        .get(format!("{}/health", server.url))
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "req-42");
    let health: Value = response.json().await.unwrap();
    assert_eq!(health["status"], "ok");
    let response = server
        .http
        .get(format!("{}/contexts", server.url))
        .send()
        .await
        .unwrap();
    let made_up = response.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(made_up.len(), 32);

    let (status, document) = server.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/chat",
        "/chat/add-ai-message",
        "/chat/invoke",
        "/context/add-messages",
        "/context/set-messages",
        "/contexts",
        "/contexts/{context_id}",
        "/health",
    ] {
        assert!(document["paths"].get(path).is_some(), "{path} missing");
    }
    // The export's query parameters list the values the server accepts.
    let parameters = document["paths"]["/contexts/{context_id}/export"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let values = |name: &str| {
        let parameter = parameters.iter().find(|p| p["name"] == name).unwrap();
        let schema = &parameter["schema"];
        // An optional parameter's schema may wrap the enum.
        let found = schema["enum"].as_array().or_else(|| {
            schema["oneOf"]
                .as_array()
                .and_then(|any| any.iter().find_map(|one| one["enum"].as_array()))
        });
        found.cloned().unwrap_or_else(|| panic!("{name}: {schema}"))
    };
    assert_eq!(
        values("format"),
        [
            "openai",
            "openai-responses",
            "anthropic",
            "gemini",
            "ollama"
        ]
    );
    assert_eq!(values("pending"), ["drop", "error"]);
    let chat = &document["components"]["schemas"]["ChatRequest"];
    assert_eq!(chat["properties"]["save_ai_messages"]["default"], true);
    assert!(document["components"]["schemas"].get("Message").is_some());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_finishes_a_preview_in_flight_and_syncs() {
    let mut server = TestServer::start(false).await;
    server.create("ctx_1").await;
    server.upstream.push([text("finished")]);
    let gate = server.upstream.hold();
    let received = server.upstream.received.notified();
    let url = format!("{}/chat", server.url);
    let http = server.http.clone();
    let chat = tokio::spawn(async move {
        http.post(url)
            .bearer_auth(ALICE)
            .json(&json!({"context_id": "ctx_1", "message": "hello", "save_ai_messages": false}))
            .send()
            .await
            .unwrap()
    });
    received.await;
    // The preview is at the upstream: shut down now, then let it answer
    // (a saved run is stopped at once instead: chat_recorded.rs).
    server.request_stop();
    gate.add_permits(1);
    let response = chat.await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["response"], "finished");
    let dir = server.stopped().await;
    // The store is released and holds the human message (the answer was
    // a preview).
    let store = convlog::store::StoreBuilder::new(dir.path().join("store"))
        .reducer(convlog::control::ContextsReducer)
        .open()
        .unwrap();
    let entries: Vec<_> = store
        .conversation("ctx_1")
        .unwrap()
        .entries()
        .map(|entry| entry.content.clone().unwrap_or_default())
        .collect();
    assert_eq!(entries, ["hello"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_append_in_json_form_and_resume_and_export_read_them() {
    let server = TestServer::start(false).await;
    server.create("ctx_9").await;
    let batch = json!({"events": [
        {"type": "conversation_recorded", "conversation_id": "ctx_9", "entry": {"evaluation_id": "eval-1", "role": "user", "content": "6*7?"}},
        {"type": "conversation_recorded", "conversation_id": "ctx_9", "entry": {"evaluation_id": "eval-1", "turn": 1, "role": "assistant", "tool_calls": [{"call_id": "calc_1", "name": "calculator", "arguments": "{\"expr\":\"6*7\"}"}]}},
    ]});
    let (status, body) = server
        .post("/contexts/ctx_9/events", ALICE, batch.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["last_lsn"].as_u64().unwrap(),
        body["first_lsn"].as_u64().unwrap() + 1
    );

    // Resume: the call is unfinished.
    let (status, state) = server.get("/contexts/ctx_9/resume", ALICE).await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["evaluation_id"], "eval-1");
    assert_eq!(state["unfinished_calls"][0]["call"]["call_id"], "calc_1");
    let (status, body) = server
        .get("/contexts/ctx_9/resume?evaluation=eval-404", ALICE)
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = server
        .get("/contexts/ctx_9/resume?evaluaton=x", ALICE)
        .await;
    assert_eq!(status, 400);
    assert!(error(&body).starts_with("Unknown query parameter \"evaluaton\""));

    // Export: the pending call dropped by default, answered with an error on request.
    let (status, request) = server
        .get("/contexts/ctx_9/export?format=openai", ALICE)
        .await;
    assert_eq!(status, 200, "{request}");
    assert_eq!(
        request["messages"],
        json!([{"role": "user", "content": "6*7?"}])
    );
    let (_, request) = server
        .get(
            "/contexts/ctx_9/export?format=anthropic&pending=error",
            ALICE,
        )
        .await;
    assert!(
        request["messages"].to_string().contains("calc_1"),
        "{request}"
    );
    let (status, body) = server
        .get("/contexts/ctx_9/export?format=cobol", ALICE)
        .await;
    assert_eq!(status, 400);
    assert!(error(&body).starts_with("format must be one of"));
    let (status, body) = server
        .get("/contexts/ctx_9/export?format=openai&curate=bogus=1", ALICE)
        .await;
    assert_eq!(status, 400, "{body}");

    // Refused: another conversation, a reserved kind, bad events, another user.
    let (status, body) = server
        .post("/contexts/ctx_9/events", ALICE, json!({"events": [
            {"type": "conversation_recorded", "conversation_id": "other", "entry": {"evaluation_id": "e", "role": "user", "content": "x"}}
        ]}))
        .await;
    assert_eq!(status, 400);
    assert!(
        error(&body).contains("conversation_id must be the context's"),
        "{body}"
    );
    let (status, body) = server
        .post("/contexts/ctx_9/events", ALICE, json!({"events": [
            {"type": "custom", "conversation_id": "ctx_9", "kind": "convlog.context.visibility", "payload": "eyJwdWJsaWMiOnRydWV9"}
        ]}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(error(&body).contains("reserved to the server"), "{body}");
    let (status, body) = server
        .post(
            "/contexts/ctx_9/events",
            ALICE,
            json!({"events": [{"type": "conversation_recorded"}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = server
        .post("/contexts/ctx_9/events", ALICE, json!({"events": []}))
        .await;
    assert_eq!(status, 400);
    let (status, body) = server
        .post(
            "/contexts/ctx_9/events",
            ALICE,
            json!({"events": {"type": "conversation_recorded"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        error(&body)
            .starts_with("Invalid JSON body at events: invalid type: map, expected a sequence"),
        "{body}"
    );
    // The events are parsed from the request's text as it came: a key
    // given twice is refused, as `convlog append` refuses it, not settled
    // silently by the last one.
    let (status, body) = server
        .post_text(
            "/contexts/ctx_9/events",
            ALICE,
            r#"{"events": [{"type": "conversation_recorded", "conversation_id": "ctx_9", "entry": {"evaluation_id": "e", "role": "user", "content": "x", "content": "y"}}]}"#,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error(&body).contains("content") && error(&body).contains("given twice"),
        "{body}"
    );
    for path in [
        "/contexts/ctx_9/resume",
        "/contexts/ctx_9/export?format=openai",
    ] {
        let (status, body) = server.get(path, BOB).await;
        assert_eq!((status, error(&body)), (403, NOT_OWNER), "{path}");
    }
    let (status, body) = server.post("/contexts/ctx_9/events", BOB, batch).await;
    assert_eq!((status, error(&body)), (403, NOT_OWNER));
    let (_, state) = server.get("/contexts/ctx_9/resume", ALICE).await;
    assert_eq!(
        state["next_sequence"], 2,
        "nothing refused was stored: {state}"
    );
    server.stop().await;
}

/// Concurrent appends to several contexts (the server makes the requests
/// that wait together durable with one sync): every request's LSNs name
/// its own events, each batch's events are contiguous, and a refused
/// request among them stores nothing while the others are stored.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_appends_each_get_the_lsns_of_their_own_events() {
    const CONTEXTS: usize = 8;
    const REQUESTS_EACH: usize = 8;
    let server = TestServer::start(false).await;
    for c in 0..CONTEXTS {
        server.create(&format!("ctx_{c}")).await;
    }
    let mut requests = Vec::new();
    for c in 0..CONTEXTS {
        for r in 0..REQUESTS_EACH {
            let (url, http) = (
                format!("{}/contexts/ctx_{c}/events", server.url),
                server.http.clone(),
            );
            let context = format!("ctx_{c}");
            let entry = |k: usize, evaluation: &str| {
                json!({"type": "conversation_recorded", "conversation_id": context,
                "entry": {"evaluation_id": evaluation, "sequence": r * 2 + k, "role": "user", "content": format!("{context}-{r}-{k}")}})
            };
            // One request per context is refused by the store (an empty
            // evaluation id in its second event).
            let bad = r == 3;
            let body =
                json!({"events": [entry(0, "eval-1"), entry(1, if bad { "" } else { "eval-1" })]});
            requests.push(tokio::spawn(async move {
                let response = http
                    .post(url)
                    .bearer_auth(ALICE)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap();
                (context, r, bad, status, body)
            }));
        }
    }
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    let dir = server.stop().await;
    let store = convlog::store::StoreBuilder::new(dir.path().join("store"))
        .reducer(convlog::control::ContextsReducer)
        .open()
        .unwrap();
    let mut stored = 0;
    for (context, r, bad, status, body) in answers {
        if bad {
            assert_eq!(status, 400, "{body}");
            assert!(error(&body).contains("evaluation_id"), "{body}");
            continue;
        }
        assert_eq!(status, 200, "{body}");
        let first = body["first_lsn"].as_u64().unwrap();
        assert_eq!(body["last_lsn"].as_u64().unwrap(), first + 1, "{body}");
        let slice = store.conversation(&context).unwrap();
        for k in 0..2 {
            let lsn = first + k as u64;
            let recorded = slice.recorded_iter().find(|recorded| recorded.lsn == lsn);
            assert_eq!(
                recorded.and_then(|recorded| recorded.entry.content.clone()),
                Some(format!("{context}-{r}-{k}")),
                "LSN {lsn}"
            );
        }
        stored += 2;
    }
    assert_eq!(stored, CONTEXTS * (REQUESTS_EACH - 1) * 2);
    for c in 0..CONTEXTS {
        let entries = store
            .conversation(&format!("ctx_{c}"))
            .unwrap()
            .entries()
            .count();
        assert_eq!(
            entries,
            (REQUESTS_EACH - 1) * 2,
            "nothing of the refused batch is stored"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_by_route_and_status() {
    let server = TestServer::start(false).await;
    server.create("ctx_1").await;
    let (status, _) = server.get("/contexts/ctx_404", ALICE).await;
    assert_eq!(status, 404);
    let text = server
        .http
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("convlog_server_requests_total{route=\"/contexts\",status=\"201\"} 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "convlog_server_requests_total{route=\"/contexts/{context_id}\",status=\"404\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("convlog_server_request_duration_seconds_count 2"),
        "{text}"
    );
    assert!(text.contains("convlog_store_events 2\n"), "{text}");
    assert!(text.contains("convlog_server_contexts 1\n"), "{text}");
    server.stop().await;
}

/// The schema a `$ref` of the served document points to.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap();
            let found = &document["components"]["schemas"][name];
            assert!(found.is_object(), "{reference} is not in the document");
            resolve(document, found)
        }
        None => schema,
    }
}

/// The `type` values of each branch of a `oneOf`.
fn branches<'a>(document: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    resolve(document, schema)["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("not a oneOf: {schema}"))
        .iter()
        .map(|branch| resolve(document, branch))
        .collect()
}

/// The first `enum` of a property (an optional one wraps it in a `oneOf`
/// with null; a referenced one is resolved).
fn enum_of(document: &Value, schema: &Value) -> Vec<String> {
    let schema = resolve(document, schema);
    if let Some(values) = schema["enum"].as_array() {
        return values
            .iter()
            .map(|value| value.as_str().unwrap().to_string())
            .collect();
    }
    let any = schema["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {schema}"));
    any.iter()
        .find(|one| resolve(document, one)["enum"].is_array())
        .map(|one| enum_of(document, one))
        .unwrap_or_else(|| panic!("no enum: {schema}"))
}

/// The served document says what the server accepts, so data made from it
/// (a schema fuzzer's) is mostly valid: the configured agents, the context
/// id's form, exactly one of `message` and `prompt`, and the events' JSON
/// form with its kinds, roles, statuses and limits.
#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_carries_the_servers_constraints() {
    let server = TestServer::start(false).await;
    let (status, document) = server.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let schemas = &document["components"]["schemas"];

    // POST /contexts: the configured agents, and the context id's form.
    let create = &schemas["CreateContextRequest"]["properties"];
    assert_eq!(enum_of(&document, &create["agent_id"]), ["assistant"]);
    assert_eq!(create["context_id"]["pattern"], "^[A-Za-z0-9._:-]{1,128}$");
    assert_eq!(
        create["context_id"]["maxLength"],
        convlog_server::CONTEXT_ID_CHARS_MAX
    );

    // add-ai-message: one of two bodies, one requiring `message`, the
    // other `prompt`, neither allowing the other.
    let body = &document["paths"]["/chat/add-ai-message"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"];
    let bodies = branches(&document, body);
    assert_eq!(bodies.len(), 2);
    for (branch, (required, refused)) in bodies
        .iter()
        .zip([("message", "prompt"), ("prompt", "message")])
    {
        let needs: Vec<&str> = branch["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|name| name.as_str().unwrap())
            .collect();
        assert_eq!(needs, ["context_id", required], "{branch}");
        assert!(branch["properties"].get(refused).is_none(), "{branch}");
        assert_eq!(branch["additionalProperties"], false, "{branch}");
    }

    // The events: 1 to MESSAGES_PER_REQUEST_MAX items, each one of the
    // five kinds, with the library's limits.
    let events = &schemas["AppendEventsRequest"]["properties"]["events"];
    assert_eq!(events["minItems"], 1);
    assert_eq!(events["maxItems"], convlog_server::MESSAGES_PER_REQUEST_MAX);
    let kinds = branches(&document, &events["items"]);
    let names: Vec<String> = kinds
        .iter()
        .flat_map(|kind| enum_of(&document, &kind["properties"]["type"]))
        .collect();
    assert_eq!(
        names,
        [
            "conversation_recorded",
            "tool_status",
            "messages_replaced",
            "history_curated",
            "custom"
        ]
    );
    for kind in &kinds {
        assert_eq!(kind["additionalProperties"], false, "{kind}");
        let id = &kind["properties"]["conversation_id"];
        assert_eq!(id["maxLength"], convlog::model::ID_BYTES_MAX, "{kind}");
        assert!(
            kind["required"]
                .as_array()
                .unwrap()
                .contains(&json!("conversation_id")),
            "{kind}"
        );
    }
    // Entries by role: tool calls only on assistant entries, a tool entry
    // names its call.
    let entries = branches(&document, &kinds[0]["properties"]["entry"]);
    let roles: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| enum_of(&document, &entry["properties"]["role"]))
        .collect();
    assert_eq!(
        roles,
        [vec!["system", "user"], vec!["assistant"], vec!["tool"]]
    );
    assert!(entries[0]["properties"].get("tool_calls").is_none());
    assert!(entries[2]["properties"].get("tool_calls").is_none());
    assert!(entries[2]["required"]
        .as_array()
        .unwrap()
        .contains(&json!("tool_call_id")));
    let assistant = &entries[1]["properties"];
    assert_eq!(
        assistant["sequence"]["maximum"],
        convlog::model::SEQUENCE_MAX
    );
    assert_eq!(assistant["turn"]["maximum"], convlog::model::TURN_MAX);
    assert_eq!(
        assistant["tool_calls"]["maxItems"],
        convlog::model::TOOL_CALLS_MAX
    );
    assert_eq!(
        assistant["finish_reason"]["maxLength"],
        convlog::model::LABEL_BYTES_MAX
    );
    let call = resolve(&document, &assistant["tool_calls"]["items"]);
    assert_eq!(
        enum_of(&document, &call["properties"]["status"]),
        ["pending", "running", "completed", "failed"]
    );
    assert_eq!(
        kinds[2]["properties"]["entries"]["maxItems"],
        convlog::model::REPLACED_ENTRIES_MAX
    );
    let custom = &kinds[4]["properties"];
    assert_eq!(custom["kind"]["pattern"], r"^(?!convlog\.)");

    // A batch of every kind, with values of the document's forms (its
    // time and base64 patterns among them), is accepted.
    server.create("ctx_1").await;
    let time = "2026-11-22T12:00:00.123456Z";
    let batch = json!({"events": [
        {"type": "conversation_recorded", "conversation_id": "ctx_1", "created_at": time,
         "entry": {"evaluation_id": "e", "role": "assistant", "created_at": time,
                   "message_id": "0b6f3c1e-6a39-4d4e-9a57-2f1d8f0c9a11",
                   "tool_calls": [{"call_id": "c1", "name": "t", "arguments": "{}",
                                   "status": "running", "started_at": time}]}},
        {"type": "tool_status", "conversation_id": "ctx_1", "evaluation_id": "e",
         "call_id": "c1", "status": "completed", "at": time},
        {"type": "messages_replaced", "conversation_id": "ctx_1", "at": time,
         "entries": [{"evaluation_id": "e", "role": "tool", "tool_call_id": "c1"}]},
        {"type": "history_curated", "conversation_id": "ctx_1", "strategy": "s",
         "original_count": 2, "curated_count": 1, "at": time},
        {"type": "custom", "conversation_id": "ctx_1", "kind": "tokens", "payload": "AAEAAAAAAAA="},
    ]});
    let (status, body) = server.post("/contexts/ctx_1/events", ALICE, batch).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}
