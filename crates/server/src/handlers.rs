//! The endpoints.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use convlog::control::{AddAiMessage, ContextInfo, ContextsReducer, ControlMessage, Principal};
use convlog::model::{ConversationEntry, Event, ToolStatus};
use convlog_agent::{RunError, RunEvent, Runner, RunnerGenerator};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::api::*;
use crate::error::ApiError;
use crate::meta::{self, context_meta_event, ContextMeta, ServerMetaReducer};
use crate::{
    AppState, CONTEXT_ID_CHARS_MAX, ERASE_REASON_CHARS_MAX, MESSAGES_PER_REQUEST_MAX,
    USER_DEFINED_BYTES_MAX,
};

/// The authenticated caller (`Authorization: Bearer TOKEN`).
pub struct Caller(pub String);

impl Caller {
    fn principal(&self) -> Principal {
        Principal::user(self.0.clone())
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Caller, ApiError> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::unauthorized(
                "Missing bearer token: send Authorization: Bearer <token>",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                ApiError::unauthorized("Malformed Authorization header: expected Bearer <token>")
            })?;
        state
            .tokens
            .user(token)
            .map(|user| Caller(user.to_string()))
            .ok_or_else(|| ApiError::unauthorized("Invalid bearer token"))
    }
}

/// A JSON body: 413 over the size limit, 422 when it is not JSON of the
/// expected shape (the message names the field at fault).
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            let inner = error.into_inner();
            let message = if path == "." || path.is_empty() {
                format!("Invalid JSON body: {inner}")
            } else {
                format!("Invalid JSON body at {path}: {inner}")
            };
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
        })?;
        deserializer.end().map_err(|error| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("Invalid JSON body: {error}"),
            )
        })?;
        Ok(ApiJson(value))
    }
}

/// Runs blocking store and generation work off the executor.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|error| {
        tracing::error!(%error, "request task failed");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request's task failed",
        )
    })?
}

impl AppState {
    fn info(&self, context_id: &str) -> Result<ContextInfo, ApiError> {
        // An erased context's events can no longer be read, its owner
        // included: 410 says it existed and is gone for good. Asked first:
        // the registry (folded before the erasure, or kept in a snapshot)
        // may still list it.
        if self.store.is_erased(context_id) {
            return Err(convlog::Error::Erased {
                conversation_id: context_id.to_string(),
            }
            .into());
        }
        let registry = self.control.registry()?;
        registry.get(context_id).cloned().ok_or_else(|| {
            ApiError::from(convlog::Error::ContextNotFound {
                context_id: context_id.to_string(),
            })
        })
    }

    /// The context, if `caller` may read it: its owner, or anyone when it
    /// is public.
    fn readable(&self, caller: &Caller, context_id: &str) -> Result<ContextInfo, ApiError> {
        let info = self.info(context_id)?;
        if !info.allows(&caller.principal()) {
            return Err(not_owner(context_id));
        }
        Ok(info)
    }

    /// The context, if `caller` may change it: its owner only.
    fn writable(&self, caller: &Caller, context_id: &str) -> Result<ContextInfo, ApiError> {
        let info = self.info(context_id)?;
        if !info.is_owned_by(&caller.principal()) {
            return Err(not_owner(context_id));
        }
        Ok(info)
    }

    fn meta(&self, context_id: &str) -> Result<Option<ContextMeta>, ApiError> {
        Ok(self
            .store
            .slice::<ServerMetaReducer>()?
            .get(context_id)
            .cloned())
    }

    /// The runner of the context's agent.
    fn runner(&self, context_id: &str) -> Result<Arc<Runner>, ApiError> {
        let agent_id = self.meta(context_id)?.map(|meta| meta.agent_id);
        agent_id
            .as_deref()
            .and_then(|agent_id| self.agents.get(agent_id))
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::CONFLICT,
                    match agent_id {
                        Some(agent_id) => format!(
                            "Context with id: {context_id} uses agent {agent_id:?}, which this server does not configure"
                        ),
                        None => format!("Context with id: {context_id} has no agent"),
                    },
                )
            })
    }

    fn generator(self: &Arc<Self>, context_id: &str) -> Result<RunnerGenerator, ApiError> {
        Ok(RunnerGenerator::new(
            self.runner(context_id)?,
            context_id,
            self.handle.clone(),
        ))
    }

    fn entries(&self, context_id: &str) -> Result<Vec<ConversationEntry>, ApiError> {
        match self.store.conversation(context_id) {
            Ok(slice) => Ok(slice.entries().cloned().collect()),
            Err(convlog::Error::ConversationNotFound { .. }) => Ok(Vec::new()),
            Err(error) => Err(error.into()),
        }
    }

    fn summary(
        &self,
        info: &ContextInfo,
    ) -> Result<(ContextSummary, Vec<ConversationEntry>), ApiError> {
        let meta = self.meta(&info.context_id)?;
        let entries = self.entries(&info.context_id)?;
        let first = entries.iter().map(|entry| entry.created_at.0).min();
        let last = entries.iter().map(|entry| entry.created_at.0).max();
        let created_micros = meta
            .as_ref()
            .map(|meta| meta.created_at)
            .or(first)
            .unwrap_or(0);
        let updated_micros = last.unwrap_or(created_micros).max(created_micros);
        let user_defined = meta
            .as_ref()
            .and_then(|meta| serde_json::from_str::<Map<String, Value>>(&meta.user_defined).ok())
            .unwrap_or_default();
        Ok((
            ContextSummary {
                context_id: info.context_id.clone(),
                agent_id: meta.map(|meta| meta.agent_id),
                user_id: info.owner.clone(),
                public: info.public,
                user_defined,
                created_at: created_micros.div_euclid(1_000_000),
                updated_at: updated_micros.div_euclid(1_000_000),
            },
            entries,
        ))
    }

    fn context_response(&self, info: &ContextInfo) -> Result<ContextResponse, ApiError> {
        let (summary, entries) = self.summary(info)?;
        Ok(ContextResponse {
            context_id: summary.context_id,
            agent_id: summary.agent_id,
            user_id: summary.user_id,
            public: summary.public,
            messages: convlog::control::message::to_messages(&entries),
            user_defined: summary.user_defined,
            created_at: summary.created_at,
            updated_at: summary.updated_at,
        })
    }
}

impl AppState {
    /// A generation with `save_ai_messages`, recorded step by step by the
    /// context's runner ([`Runner::generate`]): under the runner's claim
    /// on the context, `before` (the human message of a chat, the saved
    /// prompt of add-ai-message) is saved like `add-messages` does, then
    /// the latest evaluation is carried on — its unfinished calls run,
    /// the model called until a final answer, the step limit or calls only
    /// the client can run (returned pending). `steering` is shown to the
    /// model and never stored.
    ///
    /// The generation runs in a task of its own: a client that goes away
    /// or a request timeout does not stop it; a server shutdown does,
    /// where it stands (503; every step so far is recorded).
    async fn generate_recorded(
        self: &Arc<Self>,
        caller: Caller,
        context_id: String,
        before: Option<ControlMessage>,
        steering: Vec<String>,
    ) -> Result<ChatResponse, ApiError> {
        let principal = caller.principal();
        let runner = blocking({
            let state = Arc::clone(self);
            let context_id = context_id.clone();
            move || {
                state.writable(&caller, &context_id)?;
                state.runner(&context_id)
            }
        })
        .await?;
        let claim = runner
            .claim(&context_id)
            .map_err(|error| run_error(&context_id, error))?;
        if let Some(message) = before {
            let state = Arc::clone(self);
            let context_id = context_id.clone();
            blocking(move || {
                state.refuse_unfinished(&context_id)?;
                state
                    .control
                    .add_messages(&principal, &context_id, &[message])?;
                Ok(())
            })
            .await?;
        }
        self.mark_generation(&context_id, true).await?;
        let mut stopping = self.stopping.subscribe();
        let state = Arc::clone(self);
        let task = tokio::spawn(async move {
            let events = parking_lot::Mutex::new(Vec::new());
            let observer = |event: &RunEvent| {
                if let RunEvent::Recorded {
                    first_lsn,
                    events: batch,
                } = event
                {
                    let mut events = events.lock();
                    for (lsn, event) in (*first_lsn..).zip(batch) {
                        if let Some(value) = tool_event(lsn, event) {
                            events.push((lsn, value));
                        }
                    }
                }
            };
            let generated = tokio::select! {
                outcome = runner.generate(&claim, &steering, Some(&observer)) => outcome,
                _ = stopping.wait_for(|stopping| *stopping) => {
                    return Err(ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!(
                            "The server is shutting down: the generation of context {} was stopped where it stood, every step so far recorded; POST /chat/invoke carries it on",
                            claim.conversation_id()
                        ),
                    ))
                }
            };
            // Whatever the runner returned, the generation is over: only a
            // kill or a shutdown (above) leaves it open for resume_on_start.
            state
                .mark_generation(claim.conversation_id(), false)
                .await?;
            let outcome = generated.map_err(|error| run_error(claim.conversation_id(), error))?;
            Ok(ChatResponse {
                response: outcome.output().unwrap_or_default().to_string(),
                saved_ai_messages: true,
                generated_messages: convlog::control::message::to_messages(&outcome.entries),
                events: {
                    // Calls side by side record from tasks of their own, so
                    // their batches may reach the observer out of LSN order.
                    let mut events = events.into_inner();
                    events.sort_unstable_by_key(|(lsn, _)| *lsn);
                    events.into_iter().map(|(_, value)| value).collect()
                },
            })
        });
        task.await.map_err(|error| {
            tracing::error!(%error, "generation task failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the generation's task failed",
            )
        })?
    }

    /// Records that a recorded generation of `context_id` opens (`open`)
    /// or is over ([`meta::GENERATION`]).
    async fn mark_generation(
        self: &Arc<Self>,
        context_id: &str,
        open: bool,
    ) -> Result<(), ApiError> {
        let state = Arc::clone(self);
        let event = meta::generation_event(context_id, open);
        blocking(move || {
            state.store.append(&[event])?;
            Ok(())
        })
        .await
    }

    /// 409 when the context's latest evaluation has unfinished tool calls:
    /// a new message would land in the middle of them (answer the pending
    /// ones, or carry an interrupted generation on, with `/chat/invoke`).
    fn refuse_unfinished(&self, context_id: &str) -> Result<(), ApiError> {
        let options = convlog::resume::ResumeOptions::new();
        match self.store.resume(context_id, &options) {
            Ok(state) if !state.unfinished_calls.is_empty() => {
                let ids: Vec<String> = state
                    .unfinished_calls
                    .iter()
                    .map(|unfinished| format!("'{}'", unfinished.call.call_id))
                    .collect();
                Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "Context with id: {context_id} has unfinished tool calls: [{}]; answer the pending ones with /context/add-messages, then POST /chat/invoke to carry the generation on",
                        ids.join(", ")
                    ),
                ))
            }
            Ok(_) | Err(convlog::Error::ConversationNotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// `resume_on_start`: carries on, one after another, the latest
    /// evaluation of every context whose agent is configured and which a
    /// stop or crash interrupted: in a tool call (a call whose `running`
    /// status is recorded, with no result), or anywhere else in a recorded
    /// generation (one opened and never closed, [`meta::GENERATION`]: e.g.
    /// while it waited for the model). Stops at shutdown.
    pub(crate) async fn resume_interrupted(self: Arc<Self>) {
        let found = blocking({
            let state = Arc::clone(&self);
            move || state.interrupted()
        })
        .await;
        let interrupted = match found {
            Ok(interrupted) => interrupted,
            Err(error) => {
                tracing::error!(error = %error.message, "resume on start: cannot list the interrupted generations");
                return;
            }
        };
        let mut stopping = self.stopping.subscribe();
        for (context_id, runner, finished) in interrupted {
            let claim = match runner.claim(&context_id) {
                Ok(claim) => claim,
                Err(error) => {
                    tracing::warn!(context_id, %error, "resume on start: skipped");
                    continue;
                }
            };
            if finished {
                // Killed after its answer was recorded, before it was
                // marked over: nothing to carry on (generating again would
                // answer twice).
                if let Err(error) = self.mark_generation(&context_id, false).await {
                    tracing::warn!(context_id, error = %error.message, "resume on start: cannot close the generation");
                }
                continue;
            }
            let outcome = tokio::select! {
                outcome = runner.generate(&claim, &[], None) => outcome,
                _ = stopping.wait_for(|stopping| *stopping) => return,
            };
            match &outcome {
                Ok(outcome) => {
                    tracing::info!(context_id, stop = ?outcome.stop, entries = outcome.entries.len(), "resume on start: carried on")
                }
                Err(error) => tracing::warn!(context_id, %error, "resume on start: failed"),
            }
            if let Err(error) = self.mark_generation(&context_id, false).await {
                tracing::warn!(context_id, error = %error.message, "resume on start: cannot close the generation");
            }
        }
    }

    /// The contexts [`AppState::resume_interrupted`] carries on, with
    /// their runners and whether their latest evaluation has ended
    /// already (a generation left open after its answer was recorded).
    fn interrupted(&self) -> Result<Vec<(String, Arc<Runner>, bool)>, ApiError> {
        let registry = self.control.registry()?;
        let open = self.store.slice::<meta::GenerationsReducer>()?;
        let mut found = Vec::new();
        for info in registry.contexts() {
            if self.store.is_erased(&info.context_id) {
                continue;
            }
            let Ok(runner) = self.runner(&info.context_id) else {
                continue;
            };
            let slice = match self.store.conversation(&info.context_id) {
                Ok(slice) => slice,
                Err(convlog::Error::ConversationNotFound { .. }) => continue,
                Err(error) => return Err(error.into()),
            };
            let Some(latest) = slice.latest_evaluation() else {
                continue;
            };
            let state = convlog::resume::EvaluationState::of(&slice, latest);
            let in_a_call = state
                .unfinished
                .iter()
                .any(|(_, call)| call.status == ToolStatus::Running);
            if in_a_call || open.contains(&info.context_id) {
                found.push((info.context_id.clone(), runner, state.finished));
            }
        }
        Ok(found)
    }
}

/// A tool-status event in its JSON form with its LSN (`docs/events.md`):
/// what a generation's answer lists in `events`.
fn tool_event(lsn: u64, event: &Event) -> Option<Value> {
    if !matches!(event, Event::ToolStatus(_)) {
        return None;
    }
    let line = convlog::json::to_json_line(lsn, event).ok()?;
    serde_json::from_str(&line).ok()
}

/// A runner's failure as an answer.
fn run_error(context_id: &str, error: RunError) -> ApiError {
    match error {
        RunError::Store(error) => error.into(),
        RunError::Model { .. } | RunError::InvalidReply { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, error.to_string())
        }
        RunError::Busy { .. } => ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "Context with id: {context_id} is generating for another request; try again when it has finished"
            ),
        ),
        error => {
            tracing::error!(%error, "generation failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
    }
}

fn not_owner(context_id: &str) -> ApiError {
    convlog::Error::NotContextOwner {
        context_id: context_id.to_string(),
    }
    .into()
}

fn chat_response(generation: convlog::control::Generation) -> ChatResponse {
    ChatResponse {
        generated_messages: generation.generated_messages(),
        response: generation.response,
        saved_ai_messages: generation.saved_ai_messages,
        events: Vec::new(),
    }
}

fn check_messages(count: usize) -> Result<(), ApiError> {
    if count > MESSAGES_PER_REQUEST_MAX {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Too many messages: {count}, over the limit of {MESSAGES_PER_REQUEST_MAX} per request"
            ),
        ));
    }
    Ok(())
}

/// Whether `id` is a valid context id.
pub fn valid_context_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= CONTEXT_ID_CHARS_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

/// Send a message and let the agent answer.
#[utoipa::path(post, path = "/chat", tag = "chat", request_body = ChatRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The agent's answer", body = ChatResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "Conflict", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
        (status = 502, description = "The upstream model failed", body = ErrorBody),
    ))]
pub async fn chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<ChatRequest>,
) -> Result<Json<ChatResponse>, ApiError> {
    if request.save_ai_messages {
        let before = Some(ControlMessage::human(request.message));
        return state
            .generate_recorded(caller, request.context_id, before, Vec::new())
            .await
            .map(Json);
    }
    blocking(move || {
        state.writable(&caller, &request.context_id)?;
        let mut generator = state.generator(&request.context_id)?;
        let generation = state.control.chat(
            &caller.principal(),
            &request.context_id,
            &request.message,
            request.save_ai_messages,
            &mut generator,
        )?;
        Ok(Json(chat_response(generation)))
    })
    .await
}

/// Add a pre-written AI message, or have the agent answer a prompt.
#[utoipa::path(post, path = "/chat/add-ai-message", tag = "chat", request_body = AddAiMessageSchema,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The message added, or the agent's answer", body = ChatResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "Conflict", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
        (status = 502, description = "The upstream model failed", body = ErrorBody),
    ))]
pub async fn add_ai_message(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<AddAiMessageRequest>,
) -> Result<Json<ChatResponse>, ApiError> {
    let add = match (request.message, request.prompt) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "Provide either message or prompt, not both",
            ))
        }
        (None, None) => return Err(ApiError::bad_request("Provide either message or prompt")),
        (Some(message), None) => AddAiMessage::Message(message),
        (None, Some(prompt)) if request.save_ai_messages => {
            // Recorded step by step: the prompt saved first (under the
            // generation's claim), or shown to this generation only.
            let (before, steering) = if request.save_system_message {
                (Some(ControlMessage::system(prompt)), Vec::new())
            } else {
                (None, vec![prompt])
            };
            return state
                .generate_recorded(caller, request.context_id, before, steering)
                .await
                .map(Json);
        }
        (None, Some(prompt)) => AddAiMessage::Prompt {
            prompt,
            save_system_message: request.save_system_message,
            save_ai_messages: request.save_ai_messages,
        },
    };
    blocking(move || {
        let context_id = &request.context_id;
        state.writable(&caller, context_id)?;
        let generation = match add {
            AddAiMessage::Message(_) => {
                let mut none = |_: &[ConversationEntry]| -> Result<Vec<ConversationEntry>, String> {
                    Err("a pre-written message calls no model".to_string())
                };
                state
                    .control
                    .add_ai_message(&caller.principal(), context_id, add, &mut none)?
            }
            AddAiMessage::Prompt { .. } => {
                let mut generator = state.generator(context_id)?;
                state.control.add_ai_message(
                    &caller.principal(),
                    context_id,
                    add,
                    &mut generator,
                )?
            }
        };
        Ok(Json(chat_response(generation)))
    })
    .await
}

/// Let the agent answer the stored conversation, with no new message.
#[utoipa::path(post, path = "/chat/invoke", tag = "chat", request_body = InvokeRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The agent's answer", body = ChatResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "Conflict", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
        (status = 502, description = "The upstream model failed", body = ErrorBody),
    ))]
pub async fn invoke(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<InvokeRequest>,
) -> Result<Json<ChatResponse>, ApiError> {
    if request.save_ai_messages {
        return state
            .generate_recorded(caller, request.context_id, None, Vec::new())
            .await
            .map(Json);
    }
    blocking(move || {
        state.writable(&caller, &request.context_id)?;
        let mut generator = state.generator(&request.context_id)?;
        let generation = state.control.invoke(
            &caller.principal(),
            &request.context_id,
            request.save_ai_messages,
            &mut generator,
        )?;
        Ok(Json(chat_response(generation)))
    })
    .await
}

/// Append validated messages to a context, atomically.
#[utoipa::path(post, path = "/context/add-messages", tag = "context", request_body = MessagesRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The context after the append", body = ContextResponse),
        (status = 400, description = "The messages are not valid", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "Conflict", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn add_messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<MessagesRequest>,
) -> Result<Json<ContextResponse>, ApiError> {
    check_messages(request.messages.len())?;
    blocking(move || {
        state.writable(&caller, &request.context_id)?;
        state
            .control
            .add_messages(&caller.principal(), &request.context_id, &request.messages)?;
        let info = state.info(&request.context_id)?;
        Ok(Json(state.context_response(&info)?))
    })
    .await
}

/// Replace every message of a context, atomically (the old ones stay in the
/// store's log).
#[utoipa::path(post, path = "/context/set-messages", tag = "context", request_body = MessagesRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The context after the replacement", body = ContextResponse),
        (status = 400, description = "The messages are not valid", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "Conflict", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn set_messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<MessagesRequest>,
) -> Result<Json<ContextResponse>, ApiError> {
    check_messages(request.messages.len())?;
    blocking(move || {
        state.writable(&caller, &request.context_id)?;
        state
            .control
            .set_messages(&caller.principal(), &request.context_id, &request.messages)?;
        let info = state.info(&request.context_id)?;
        Ok(Json(state.context_response(&info)?))
    })
    .await
}

/// Create a context owned by the caller.
#[utoipa::path(post, path = "/contexts", tag = "context", request_body = CreateContextRequest,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The new context", body = ContextResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 409, description = "The context exists", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn create_context(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateContextRequest>,
) -> Result<Response, ApiError> {
    if !state.agents.contains_key(&request.agent_id) {
        return Err(ApiError::bad_request(format!(
            "Unknown agent_id {:?}: the server configures {}",
            request.agent_id,
            state
                .agents
                .keys()
                .map(|id| format!("{id:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let context_id = match request.context_id {
        Some(id) if !valid_context_id(&id) => {
            return Err(ApiError::bad_request(format!(
                "context_id must be 1 to {CONTEXT_ID_CHARS_MAX} characters of A-Z a-z 0-9 . _ : -"
            )))
        }
        Some(id) => id,
        None => format!("ctx_{}", uuid::Uuid::new_v4().simple()),
    };
    let user_defined = Value::Object(request.user_defined).to_string();
    if user_defined.len() > USER_DEFINED_BYTES_MAX {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "user_defined is {} bytes of JSON, over the limit of {USER_DEFINED_BYTES_MAX}",
                user_defined.len()
            ),
        ));
    }
    let response = blocking(move || {
        let _guard = state.create_lock.lock();
        if state.control.registry()?.get(&context_id).is_some() {
            return Err(convlog::Error::ContextExists { context_id }.into());
        }
        let meta = ContextMeta {
            agent_id: request.agent_id,
            user_defined,
            created_at: convlog::model::Timestamp::now().0,
        };
        state.store.append(&[
            convlog::control::context_created_event(&context_id, Some(&caller.0), request.public),
            context_meta_event(&context_id, &meta),
        ])?;
        let info = state.info(&context_id)?;
        state.context_response(&info)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// The caller's contexts (those they own).
#[utoipa::path(get, path = "/contexts", tag = "context",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The caller's contexts", body = ContextList),
        (status = 401, description = "No or invalid token", body = ErrorBody),
    ))]
pub async fn list_contexts(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json<ContextList>, ApiError> {
    blocking(move || {
        let registry = state.store.slice::<ContextsReducer>()?;
        let principal = caller.principal();
        let contexts = registry
            .contexts()
            .filter(|info| info.is_owned_by(&principal))
            .filter(|info| !state.store.is_erased(&info.context_id))
            .map(|info| state.summary(info).map(|(summary, _)| summary))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Json(ContextList { contexts }))
    })
    .await
}

/// A context with its messages (its owner, or anyone if it is public).
#[utoipa::path(get, path = "/contexts/{context_id}", tag = "context",
    params(("context_id" = String, Path, description = "The context", example = "ctx_123")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The context", body = ContextResponse),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
    ))]
pub async fn get_context(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
) -> Result<Json<ContextResponse>, ApiError> {
    blocking(move || {
        let info = state.readable(&caller, &context_id)?;
        Ok(Json(state.context_response(&info)?))
    })
    .await
}

/// Make a context public or private (its owner only).
#[utoipa::path(patch, path = "/contexts/{context_id}", tag = "context",
    params(("context_id" = String, Path, description = "The context", example = "ctx_123")),
    request_body = UpdateContextRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The context", body = ContextResponse),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn update_context(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    ApiJson(request): ApiJson<UpdateContextRequest>,
) -> Result<Json<ContextResponse>, ApiError> {
    blocking(move || {
        state.writable(&caller, &context_id)?;
        let info = state
            .control
            .set_public(&caller.principal(), &context_id, request.public)?;
        Ok(Json(state.context_response(&info)?))
    })
    .await
}

/// Liveness: the server runs and its store answers.
#[utoipa::path(get, path = "/health", tag = "operations",
    responses((status = 200, description = "Healthy", body = Health)))]
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Health> {
    Json(Health {
        status: "ok".to_string(),
        // Not `stats()`: it walks the whole index.
        last_lsn: state.store.next_lsn().saturating_sub(1),
    })
}

/// Sign a checkpoint of the tamper-evident store now and return it
/// (docs/tamper.md): the users listed in `[tamper] auditors` only (a
/// server without `[tamper]` has none, so every caller gets 403). It is
/// also written to the configured `checkpoint_file`.
#[utoipa::path(post, path = "/checkpoint", tag = "operations",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The signed checkpoint", body = CheckpointResponse),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "The caller is not an auditor", body = ErrorBody),
    ))]
pub async fn checkpoint(
    State(state): State<Arc<AppState>>,
    caller: Caller,
) -> Result<Json<CheckpointResponse>, ApiError> {
    if !state.auditors.contains(&caller.0) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "User {:?} may not make checkpoints: only the users in [tamper] auditors may",
                caller.0
            ),
        ));
    }
    blocking(move || {
        let checkpoint = state.store.checkpoint()?;
        Ok(Json(CheckpointResponse::from(&checkpoint)))
    })
    .await
}

/// Whether `kind` is a custom-event kind only the server writes (context
/// creation, visibility and metadata): a client appending one could take
/// over or change a context.
fn reserved_kind(kind: &str) -> bool {
    kind.starts_with("convlog.context.") || kind == crate::meta::CONTEXT_META
}

/// Append events in their JSON form (`docs/events.md`) to a context, as
/// one atomic batch (its owner only).
#[utoipa::path(post, path = "/contexts/{context_id}/events", tag = "context",
    params(("context_id" = String, Path, description = "The context", example = "ctx_123")),
    request_body = AppendEventsRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The LSNs the batch got", body = AppendEventsResponse),
        (status = 400, description = "An event is not valid", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn append_events(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    request: Request,
) -> Result<Json<AppendEventsResponse>, ApiError> {
    // The body is checked as JSON of the request's shape, but the events
    // stay text: their JSON form is parsed once, into events, below (not
    // into a JSON tree first, then written out and parsed again).
    let bytes = axum::body::Bytes::from_request(request, &state)
        .await
        .map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
    let request: AppendEventsRequest = serde_json::from_slice(&bytes).map_err(|error| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid JSON body: {error}"),
        )
    })?;
    let text = request.events.get();
    let Some(items) = text.strip_prefix('[') else {
        // Not an array: serde's own words for it, as for any other field.
        let error = serde_json::from_str::<Vec<serde::de::IgnoredAny>>(text)
            .err()
            .map_or_else(
                || "expected a sequence".to_string(),
                |error| error.to_string(),
            );
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Invalid JSON body at events: {error}"),
        ));
    };
    if items.trim_start().starts_with(']') {
        return Err(ApiError::bad_request(
            "events is empty: a batch needs at least one event",
        ));
    }
    // Checked and parsed here, on the async worker (in-memory work; a
    // conversation is read only for an entry without a sequence); the
    // append itself goes to the appending thread, gathered with the
    // requests that arrive meanwhile, and is answered once durable.
    state.writable(&caller, &context_id)?;
    let store = &state.store;
    let events = convlog::json::parse_line(1, text, &mut |conversation, evaluation| {
        Ok(match store.conversation(conversation) {
            Ok(slice) => slice.next_sequence(evaluation),
            Err(_) => 0,
        })
    })?;
    // Counted once parsed, before anything is stored.
    check_messages(events.len())?;
    for (index, event) in events.iter().enumerate() {
        if event.conversation_id() != Some(context_id.as_str()) {
            return Err(ApiError::bad_request(format!(
                "events[{index}]: conversation_id must be the context's, {context_id:?}"
            )));
        }
        if let convlog::Event::Custom(custom) = event {
            if reserved_kind(&custom.kind) {
                return Err(ApiError::bad_request(format!(
                    "events[{index}]: custom kind {:?} is reserved to the server",
                    custom.kind
                )));
            }
        }
    }
    let lsns = match &state.appender {
        Some(appender) => appender.append(events).await?,
        None => {
            let store = Arc::clone(&state.store);
            blocking(move || Ok(store.append(&events)?)).await?
        }
    };
    Ok(Json(AppendEventsResponse {
        first_lsn: lsns.start,
        last_lsn: lsns.end - 1,
    }))
}

/// What an evaluation of the context left to do: unfinished and finished
/// tool calls, next sequence and turn (its owner, or anyone if public).
#[utoipa::path(get, path = "/contexts/{context_id}/resume", tag = "context",
    params(
        ("context_id" = String, Path, description = "The context", example = "ctx_123"),
        ("evaluation" = Option<String>, Query, description = "The evaluation (default: the latest)"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The resume state", body = Object),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context, evaluation or message", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
    ))]
pub async fn resume(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    query: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|error| ApiError::bad_request(error.body_text()))?;
    only_keys(&query, &["evaluation"])?;
    blocking(move || {
        state.readable(&caller, &context_id)?;
        let options =
            convlog::resume::ResumeOptions::new().evaluation_id(query.get("evaluation").cloned());
        let resumed = state.store.resume(&context_id, &options)?;
        Ok(Json(serde_json::to_value(&resumed).map_err(|error| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        })?))
    })
    .await
}

fn only_keys(query: &BTreeMap<String, String>, known: &[&str]) -> Result<(), ApiError> {
    match query.keys().find(|key| !known.contains(&key.as_str())) {
        Some(key) => Err(ApiError::bad_request(format!(
            "Unknown query parameter {key:?}, expected one of: {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// The context rebuilt as a provider's request body, optionally curated
/// first (its owner, or anyone if public).
#[utoipa::path(get, path = "/contexts/{context_id}/export", tag = "context",
    params(
        ("context_id" = String, Path, description = "The context", example = "ctx_123"),
        ("format" = inline(crate::api::ExportFormat), Query, description = "openai, openai-responses, anthropic, gemini or ollama", example = "openai"),
        ("pending" = inline(Option<crate::api::ExportPending>), Query, description = "Unfinished tool calls: drop (default) or error"),
        ("curate" = Option<String>, Query, description = "History managers applied first: window=N,truncate=N,budget=N,prune=N"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The request body", body = Object),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 409, description = "The conversation has no form in that format", body = ErrorBody),
    ))]
pub async fn export(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    query: Result<Query<BTreeMap<String, String>>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    use convlog::provider::{PendingCalls, Provider, RenderOptions};
    let Query(query) = query.map_err(|error| ApiError::bad_request(error.body_text()))?;
    only_keys(&query, &["format", "pending", "curate"])?;
    let provider = match query.get("format").map(String::as_str) {
        Some("openai") => Provider::OpenAiChat,
        Some("openai-responses") => Provider::OpenAiResponses,
        Some("anthropic") => Provider::Anthropic,
        Some("gemini") => Provider::Gemini,
        Some("ollama") => Provider::Ollama,
        _ => {
            return Err(ApiError::bad_request(
                "format must be one of openai, openai-responses, anthropic, gemini, ollama",
            ))
        }
    };
    let pending = match query.get("pending").map(String::as_str) {
        None | Some("drop") => PendingCalls::Drop,
        Some("error") => PendingCalls::SyntheticError,
        Some(_) => return Err(ApiError::bad_request("pending must be drop or error")),
    };
    let manager = query
        .get("curate")
        .map(|spec| convlog::history::parse_curation(spec))
        .transpose()?;
    blocking(move || {
        state.readable(&caller, &context_id)?;
        let mut entries = state.entries(&context_id)?;
        if let Some(manager) = manager {
            use convlog::history::{CurationContext, HistoryManager};
            let slice = state.store.conversation(&context_id).ok();
            let mut context = CurationContext::new().with_store(&state.store);
            if let Some(slice) = &slice {
                context = context.with_conversation(slice);
            }
            entries = manager.curate(&entries, &context);
        }
        let request =
            convlog::provider::render(provider, &entries, &RenderOptions::new().pending(pending))?;
        Ok(Json(request.body()))
    })
    .await
}

/// Erase a context for good (its owner only; the store must be encrypted,
/// `docs/erasure.md`): its key is destroyed, so its content can never be
/// read again, by anyone. The erasure is recorded in the log (who: `user
/// ID over HTTP` and the reason; when); from then on every request naming
/// the context answers 410, this one included.
#[utoipa::path(post, path = "/contexts/{context_id}/erase", tag = "context",
    params(("context_id" = String, Path, description = "The context", example = "ctx_123")),
    request_body = EraseRequest,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Erased", body = EraseResponse),
        (status = 400, description = "The reason is too long", body = ErrorBody),
        (status = 401, description = "No or invalid token", body = ErrorBody),
        (status = 403, description = "Context does not belong to user", body = ErrorBody),
        (status = 404, description = "No such context", body = ErrorBody),
        (status = 409, description = "The store is not encrypted, the context was recorded in the clear, or it is generating", body = ErrorBody),
        (status = 410, description = "The context was erased", body = ErrorBody),
        (status = 413, description = "Too large", body = ErrorBody),
        (status = 422, description = "Malformed JSON", body = ErrorBody),
    ))]
pub async fn erase_context(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(context_id): Path<String>,
    ApiJson(request): ApiJson<EraseRequest>,
) -> Result<Json<EraseResponse>, ApiError> {
    let reason = request.reason.unwrap_or_default();
    let chars = reason.chars().count();
    if chars > ERASE_REASON_CHARS_MAX {
        return Err(ApiError::bad_request(format!(
            "reason has {chars} characters, over the limit of {ERASE_REASON_CHARS_MAX}"
        )));
    }
    blocking(move || {
        state.writable(&caller, &context_id)?;
        if !state.store.is_encrypted() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "Context with id: {context_id} cannot be erased: the store is not encrypted (start the server with CONVLOG_KEY_FILE on an encrypted store; docs/erasure.md)"
                ),
            ));
        }
        // No recorded generation may write to the context while its key
        // goes, nor start meanwhile: the runner's claim, held to the end.
        let _claim = match state.runner(&context_id) {
            Ok(runner) => Some(
                runner
                    .claim(&context_id)
                    .map_err(|error| run_error(&context_id, error))?,
            ),
            Err(_) => None,
        };
        let by = if reason.trim().is_empty() {
            format!("user {} over HTTP", caller.0)
        } else {
            format!("user {} over HTTP: {}", caller.0, reason.trim())
        };
        let report = state
            .store
            .erase(&context_id, &by)
            .map_err(|error| match error {
                // Recorded in the clear, before the store was encrypted.
                convlog::Error::Encryption { .. } => {
                    ApiError::new(StatusCode::CONFLICT, error.to_string())
                }
                error => error.into(),
            })?;
        match (report.erasure, report.lsn) {
            (Some(erasure), Some(lsn)) => Ok(Json(EraseResponse {
                context_id,
                erased_by: erasure.by,
                erased_at: erasure.at.0.div_euclid(1_000_000),
                lsn,
            })),
            // Another request erased it first.
            _ => Err(convlog::Error::Erased {
                conversation_id: context_id,
            }
            .into()),
        }
    })
    .await
}
