# Renders, in-process (Rack::MockRequest: no server to boot), every page of Sidekiq 6.4's own
# dashboard over what is in Redis: the fixed pages, each queue's page and each entry's page of
# Retries, Scheduled and Dead. Prints {path: {"status": n, "body": html} or {"error": text}}:
# a Ruby exception while rendering is reported as the error, with where it was raised.
require 'json'
require 'securerandom'
require 'rack/mock'
require 'rack/session/cookie'
require 'sidekiq/web'
require 'sidekiq/api'

app = Rack::Builder.new do
  use Rack::Session::Cookie, secret: SecureRandom.hex(32), same_site: true, max_age: 86_400
  run Sidekiq::Web
end.to_app

paths = %w[/ /busy /queues /retries /scheduled /morgue /stats /stats/queues]
paths += Sidekiq::Queue.all.map { |queue| "/queues/#{Rack::Utils.escape_path(queue.name)}" }
{ 'retries' => Sidekiq::RetrySet, 'scheduled' => Sidekiq::ScheduledSet,
  'morgue' => Sidekiq::DeadSet }.each do |page, set|
  set.new.each { |entry| paths << "/#{page}/#{entry.score}-#{entry.jid}" }
end

pages = {}
paths.each do |path|
  response = Rack::MockRequest.new(app).get(path)
  pages[path] = { 'status' => response.status, 'body' => response.body }
rescue StandardError, ScriptError => e
  pages[path] = { 'error' => "#{e.class}: #{e.message}\n#{e.backtrace.first(8).join("\n")}" }
end
puts JSON.generate(pages)
