// prefix-serve driven by the official openai npm client (installed by
// scripts/deps.sh into tests/serve/node_modules where npm is): chat,
// streaming with usage, completions, models and an error, as a client
// application would use them. Prints one "ok ..." line per check and exits
// 1 on the first failure, saying what differed.
//
//   node openai_client.mjs BASE_URL API_KEY
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });

function check(cond, what, got) {
	if (!cond) {
		console.log(`FAIL ${what}: ${JSON.stringify(got)}`);
		process.exit(1);
	}
	console.log(`ok ${what}`);
}

const messages = [
	{ role: 'system', content: 'You are a terse assistant.' },
	{ role: 'user', content: 'Say something about caches.' },
];
// ignore_eos (vLLM's extra) keeps a random model's answer at max_tokens.
const common = { model: 'm', max_tokens: 8, temperature: 0, ignore_eos: true };

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === 'string', 'models.list', models.data);

const whole = await client.chat.completions.create({ ...common, messages });
check(whole.object === 'chat.completion' && whole.id.startsWith('chatcmpl-'), 'chat object', whole);
check(whole.choices.length === 1 && whole.choices[0].message.role === 'assistant' &&
	typeof whole.choices[0].message.content === 'string', 'chat message', whole.choices);
check(whole.choices[0].finish_reason === 'length', 'chat finish_reason', whole.choices[0]);
check(whole.usage.completion_tokens === 8 && whole.usage.prompt_tokens > 0 &&
	whole.usage.total_tokens === whole.usage.prompt_tokens + 8, 'chat usage', whole.usage);
check(typeof whole.usage.prompt_tokens_details?.cached_tokens === 'number', 'cached_tokens',
	whole.usage);

const stream = await client.chat.completions.create({
	...common, messages, stream: true, stream_options: { include_usage: true },
});
let text = '', first = null, usage = null, finish = null, chunks = 0;
for await (const chunk of stream) {
	chunks++;
	check(chunk.object === 'chat.completion.chunk', `chunk ${chunks} object`, chunk);
	if (first === null)
		first = chunk;
	if (chunk.usage)
		usage = chunk;
	for (const c of chunk.choices) {
		text += c.delta.content ?? '';
		if (c.finish_reason)
			finish = c.finish_reason;
	}
}
check(first.choices[0].delta.role === 'assistant', 'stream starts with the role', first);
check(text === whole.choices[0].message.content, 'stream text equals the whole response',
	{ text, whole: whole.choices[0].message.content });
check(finish === 'length', 'stream finish_reason', finish);
check(usage && usage.choices.length === 0 && usage.usage.completion_tokens === 8,
	'stream usage chunk', usage);

const two = await client.chat.completions.create({ ...common, messages, n: 2 });
check(two.choices.length === 2 && two.choices[1].index === 1 &&
	two.choices[1].message.content === whole.choices[0].message.content,
	'n=2 (greedy: both as the single answer)', two.choices);

const comp = await client.completions.create({ ...common, prompt: 'Caches are' });
check(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string' &&
	comp.usage.completion_tokens === 8, 'completions', comp);

try {
	await client.chat.completions.create({ ...common, messages, temperature: -1 });
	check(false, 'a bad temperature is refused', 'no error');
} catch (e) {
	check(e instanceof OpenAI.APIError && e.status === 400 && e.param === 'temperature' &&
		e.type === 'invalid_request_error', 'a bad temperature is a 400 naming it',
		{ status: e.status, param: e.param, type: e.type, message: e.message });
}
