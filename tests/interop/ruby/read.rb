# Prints, as JSON, what Sidekiq 6.4's own API reads from Redis: Stats, RetrySet, DeadSet,
# ProcessSet and Workers (the Busy page's source).
require 'json'
require 'sidekiq/api'

def entry(job)
  { 'jid' => job.jid, 'class' => job.klass, 'display_class' => job.display_class,
    'args' => job.args, 'queue' => job.queue, 'error_class' => job['error_class'],
    'error_message' => job['error_message'], 'retry_count' => job['retry_count'],
    'at' => job.at.to_f, 'enqueued_at' => job.enqueued_at&.to_f,
    'created_at' => job.created_at.to_f }
end

stats = Sidekiq::Stats.new
processes = Sidekiq::ProcessSet.new.map do |process|
  { 'identity' => process.identity, 'hostname' => process['hostname'], 'pid' => process['pid'],
    'tag' => process['tag'], 'concurrency' => process['concurrency'],
    'queues' => process['queues'], 'busy' => process['busy'], 'quiet' => process.stopping?,
    'started_at' => process['started_at'], 'beat' => process['beat'] }
end
workers = Sidekiq::Workers.new.map do |process_id, thread_id, work|
  payload = work['payload']
  payload = JSON.parse(payload) if payload.is_a?(String)
  { 'process' => process_id, 'thread' => thread_id, 'queue' => work['queue'],
    'class' => payload['class'], 'args' => payload['args'], 'run_at' => work['run_at'] }
end
puts JSON.generate(
  'stats' => { 'processed' => stats.processed, 'failed' => stats.failed,
               'scheduled_size' => stats.scheduled_size, 'retry_size' => stats.retry_size,
               'dead_size' => stats.dead_size, 'processes_size' => stats.processes_size,
               'workers_size' => stats.workers_size, 'enqueued' => stats.enqueued,
               'queues' => stats.queues },
  'retries' => Sidekiq::RetrySet.new.map { |job| entry(job) },
  'dead' => Sidekiq::DeadSet.new.map { |job| entry(job) },
  'processes' => processes,
  'workers' => workers
)
